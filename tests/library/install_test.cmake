# CTest library_install_test: `cmake --install` into a temp prefix, move the prefix (the install
# must be relocatable), build tools/examples/train_service against it with find_package(mixtrain
# CONFIG) and run it on models/mlp.onnx. Run as
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DCXX=... -DGENERATOR=... -P install_test.cmake
cmake_minimum_required(VERSION 3.25)
string(RANDOM LENGTH 10 suffix)
set(tmp "${BUILD_DIR}/library_install_test.${suffix}")
file(MAKE_DIRECTORY ${tmp})

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${tmp}/prefix)
file(RENAME ${tmp}/prefix ${tmp}/moved)
foreach(f include/mixtrain/mixtrain.h lib/cmake/mixtrain/mixtrainConfig.cmake bin/mixtrain)
  if(NOT EXISTS ${tmp}/moved/${f})
    message(FATAL_ERROR "the install lacks ${f}")
  endif()
endforeach()
# Only the public headers are installed: the example cannot include internal ones by accident.
file(GLOB_RECURSE headers RELATIVE ${tmp}/moved/include ${tmp}/moved/include/*)
message(STATUS "installed headers: ${headers}")

run("configuring the example" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tools/examples -B ${tmp}/build
    -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${tmp}/moved)
run("building the example" ${CMAKE_COMMAND} --build ${tmp}/build)
file(MAKE_DIRECTORY ${tmp}/work)
run("train_service" ${tmp}/build/train_service ${SOURCE_DIR}/models/mlp.onnx ${tmp}/work --steps=10)
message(STATUS "train_service said:\n${last_output}")
if(NOT last_output MATCHES "train_service: ok" OR NOT EXISTS ${tmp}/work/service.onnx)
  message(FATAL_ERROR "train_service did not finish")
endif()
run("installed mixtrain --help" ${tmp}/moved/bin/mixtrain --help)
file(REMOVE_RECURSE ${tmp})
