# The two commands of the README: `make run` (train the default model) and `make test`.
# Both install missing Debian packages, configure and build incrementally first.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all deps build run test clean
all: build

deps:
	@./tools/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release > $(BUILD).configure.log 2>&1 \
	  || (cat $(BUILD).configure.log; exit 1)
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/mixtrain train

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD) $(BUILD).configure.log
