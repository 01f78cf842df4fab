# The installed package, used from outside: installs the build tree into a
# fresh prefix, then configures, builds and runs tests/install/example twice,
# finding tensorpc once with find_package and once with pkg-config.
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DCXX=... [-DLAUNCHER=ccache] -P install_test.cmake
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR CXX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_test.cmake: -D${var}= is required")
  endif()
endforeach()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

foreach(path include/tensorpc/model.h include/tensorpc/version.h lib/libtensorpc_core.a lib/libtensorpc_api.a
        lib/cmake/tensorpc/tensorpcConfig.cmake lib/cmake/tensorpc/tensorpcConfigVersion.cmake
        lib/pkgconfig/tensorpc.pc bin/tensorpc bin/tensorpc-server)
  if(NOT EXISTS ${prefix}/${path})
    message(FATAL_ERROR "cmake --install did not install ${path}")
  endif()
endforeach()
run("tensorpc --version" ${prefix}/bin/tensorpc --version)
if(NOT last_output MATCHES "tensorpc [0-9]+\\.[0-9]+\\.[0-9]+ \\(protocol [0-9]+\\.[0-9]+\\.[0-9]+\\)")
  message(FATAL_ERROR "tensorpc --version printed:\n${last_output}")
endif()

set(launcher "")
if(LAUNCHER)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
set(model ${SOURCE_DIR}/models/kjv-tiny.gguf)
foreach(way config pkgconfig)
  set(build ${WORK_DIR}/build-${way})
  set(use_pc OFF)
  if(way STREQUAL "pkgconfig")
    set(use_pc ON)
  endif()
  run("configuring the example (${way})" ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${prefix}/lib/pkgconfig
      ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/example -B ${build} -G Ninja -DCMAKE_BUILD_TYPE=Release
      -DCMAKE_CXX_COMPILER=${CXX} ${launcher} -DCMAKE_PREFIX_PATH=${prefix} -DUSE_PKG_CONFIG=${use_pc})
  run("building the example (${way})" ${CMAKE_COMMAND} --build ${build})
  run("running the example (${way})" ${build}/example ${model})
  if(NOT last_output MATCHES "generated: [1-9][0-9]* tokens")
    message(FATAL_ERROR "the example (${way}) printed:\n${last_output}")
  endif()
  message(STATUS "${way}:\n${last_output}")
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
