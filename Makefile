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

# The suite runs twice: with every ISA the CPU has, then capped at AVX2 (our dispatch and
# oneDNN's), so the paths of AVX2-only CPUs are tested on AVX-512 machines too.
test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	MIXTRAIN_MAX_ISA=avx2 DNNL_MAX_CPU_ISA=AVX2 ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD) $(BUILD).configure.log
