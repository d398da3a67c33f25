# Builds the relocatable bundle: `cmake -DBUILD_DIR=... -DNAME=... [-DOUT_DIR=...] -P MakeBundle.cmake`
# (the `bundle` target runs it). Installs into a staging folder, copies in every shared library
# that bin/mixtrain and lib/libmixtrain.so load except those a plain Debian 12 system provides
# (glibc, the GCC runtime, the libraries of Debian's required packages) and the CUDA driver and
# toolkit (the target machine's own must be used), then packs OUT_DIR/NAME.tar.gz.
cmake_minimum_required(VERSION 3.25)
if(NOT OUT_DIR)
  set(OUT_DIR ${BUILD_DIR})
endif()
set(stage ${OUT_DIR}/bundle-stage)
set(root ${stage}/${NAME})
file(REMOVE_RECURSE ${stage})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${root} RESULT_VARIABLE rc
                OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "bundle: cmake --install ${BUILD_DIR} failed")
endif()

# Sonames of libraries taken from the target system. Everything else is bundled.
set(system_libs
    # glibc and the GCC runtime (libstdc++6, libgcc-s1 are in every Debian 12)
    "^(ld-linux.*|linux-vdso.*|libc|libm|libdl|librt|libpthread|libresolv|libutil|libanl|libstdc\\+\\+|libgcc_s)\\.so"
    # libraries of Debian 12's required/important packages (apt and dpkg depend on them)
    "^(libz|liblzma|libbz2|libzstd|liblz4|libgnutls|libnettle|libhogweed|libgmp|libp11-kit|libtasn1|libidn2|libunistring|libffi|libcrypt|libselinux|libpcre2-8|libsystemd|libudev|libcap|libgcrypt|libgpg-error|libxxhash|libmd|libacl|libattr|libaudit|libcap-ng|libdb-5)\\.so"
    # the CUDA driver and toolkit
    "^(libcuda|libcudart|libcublas|libcublasLt|libcudnn.*|libnvrtc|libnvJitLink|libcufft|libcurand|libcusparse|libcusolver|libnvidia-.*)\\.so")
file(GET_RUNTIME_DEPENDENCIES
     EXECUTABLES ${root}/bin/mixtrain
     LIBRARIES ${root}/lib/libmixtrain.so
     DIRECTORIES ${BUILD_DIR}
     RESOLVED_DEPENDENCIES_VAR resolved
     UNRESOLVED_DEPENDENCIES_VAR unresolved
     PRE_EXCLUDE_REGEXES ${system_libs} "^libmixtrain\\.so")
if(unresolved)
  message(FATAL_ERROR "bundle: cannot find ${unresolved}")
endif()
foreach(lib ${resolved})
  get_filename_component(name ${lib} NAME)
  # Copy the real file under the name the loader asks for (the soname link's name).
  file(REAL_PATH ${lib} real)
  file(COPY_FILE ${real} ${root}/lib/${name})
  list(APPEND bundled ${name})
endforeach()
list(SORT bundled)
string(REPLACE ";" " " bundled_text "${bundled}")
message(STATUS "bundle: lib/ gets ${bundled_text}")

execute_process(COMMAND ${CMAKE_COMMAND} -E tar czf ${OUT_DIR}/${NAME}.tar.gz ${NAME}
                WORKING_DIRECTORY ${stage} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "bundle: tar failed")
endif()
file(REMOVE_RECURSE ${stage})
message(STATUS "bundle: ${OUT_DIR}/${NAME}.tar.gz")
