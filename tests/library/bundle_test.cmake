# CTest library_bundle_test: makes the relocatable bundle (cmake/MakeBundle.cmake) in a temp dir,
# unpacks it elsewhere and runs bin/mixtrain --help and a 3-step training run from there; checks
# with ldd that every library the binary loads comes from the bundle or the system list.
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DNAME=... -P bundle_test.cmake
cmake_minimum_required(VERSION 3.25)
string(RANDOM LENGTH 10 suffix)
set(tmp "${BUILD_DIR}/library_bundle_test.${suffix}")
file(MAKE_DIRECTORY ${tmp}/out ${tmp}/unpacked)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(last_output "${out}${err}" PARENT_SCOPE)
endfunction()

run("making the bundle" ${CMAKE_COMMAND} -DBUILD_DIR=${BUILD_DIR} -DNAME=${NAME} -DOUT_DIR=${tmp}/out
    -P ${SOURCE_DIR}/cmake/MakeBundle.cmake)
message(STATUS "${last_output}")
run("unpacking" ${CMAKE_COMMAND} -E tar xzf ${tmp}/out/${NAME}.tar.gz WORKING_DIRECTORY ${tmp}/unpacked)
set(root ${tmp}/unpacked/${NAME})
foreach(f bin/mixtrain lib/libmixtrain.so include/mixtrain/mixtrain.h lib/cmake/mixtrain/mixtrainConfig.cmake)
  if(NOT EXISTS ${root}/${f})
    message(FATAL_ERROR "the bundle lacks ${f}")
  endif()
endforeach()

# Every library outside glibc/GCC runtime/CUDA/Debian base must resolve into the bundle.
file(REAL_PATH ${root} root_real)
run("ldd" ldd ${root}/bin/mixtrain)
string(REPLACE "\n" ";" lines "${last_output}")
set(from_bundle 0)
foreach(line ${lines})
  if(NOT line MATCHES "=> (/[^ ]+)")
    continue()
  endif()
  file(REAL_PATH ${CMAKE_MATCH_1} path)  # ldd prints .../bin/../lib/...
  get_filename_component(name ${path} NAME)
  if(path MATCHES "^${root_real}/lib/")
    math(EXPR from_bundle "${from_bundle} + 1")
  elseif(name MATCHES "^lib(onnx|protobuf|dnnl|absl_|zip|gomp|mixtrain)")
    message(FATAL_ERROR "bin/mixtrain loads ${path} from outside the bundle")
  endif()
endforeach()
message(STATUS "bin/mixtrain loads ${from_bundle} libraries from the bundle")

run("bin/mixtrain --help" ${root}/bin/mixtrain --help)
if(NOT last_output MATCHES "train")
  message(FATAL_ERROR "unexpected --help output: ${last_output}")
endif()
run("training from the bundle" ${root}/bin/mixtrain train ${SOURCE_DIR}/models/mlp.onnx
    --data=${SOURCE_DIR}/tests/library/data/tiny.npz --steps=3 --batch-size=16 --log-every=1)
message(STATUS "${last_output}")
if(NOT last_output MATCHES "trained 3 steps")
  message(FATAL_ERROR "the bundled mixtrain did not train 3 steps")
endif()
file(REMOVE_RECURSE ${tmp})
