# `cmake --install`: what a program outside the tree needs to build on
# tensorpc — the public headers (include/tensorpc, and the generated
# version.h), every static library of the `tensorpc` target (an INTERFACE
# target over one library per layer), a CMake package (find_package(tensorpc),
# target tensorpc::tensorpc) and a pkg-config file (tensorpc.pc). The tools'
# two programs are installed by tools/CMakeLists.txt.
include(CMakePackageConfigHelpers)

set(TENSORPC_LIBRARIES tensorpc_api tensorpc_model tensorpc_server tensorpc_client tensorpc_transport tensorpc_wire
  tensorpc_cpu tensorpc_backend tensorpc_core)
# The Vulkan device links the Vulkan loader; the package finds it as the build did.
set(TENSORPC_PC_REQUIRES "libpcre2-8 openssl")
if(TENSORPC_VULKAN)
  list(INSERT TENSORPC_LIBRARIES 7 tensorpc_vulkan)
  string(APPEND TENSORPC_PC_REQUIRES " vulkan")
endif()

install(TARGETS tensorpc ${TENSORPC_LIBRARIES}
  EXPORT tensorpcTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/tensorpc DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/tensorpc/version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tensorpc)

set(TENSORPC_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tensorpc)
install(EXPORT tensorpcTargets NAMESPACE tensorpc:: DESTINATION ${TENSORPC_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/tensorpcConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tensorpcConfig.cmake INSTALL_DESTINATION ${TENSORPC_CMAKE_DIR})
# Releases before 1.0 may break their API in a minor version.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tensorpcConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tensorpcConfig.cmake ${PROJECT_BINARY_DIR}/tensorpcConfigVersion.cmake
  DESTINATION ${TENSORPC_CMAKE_DIR})

# tensorpc.pc: the libraries in link order (each before those it uses); the
# system libraries static linking needs come from the packages it requires.
set(TENSORPC_PC_LIBS "")
foreach(lib ${TENSORPC_LIBRARIES})
  string(APPEND TENSORPC_PC_LIBS " -l${lib}")
endforeach()
# The prefix is found from the file's own place (pcfiledir), so an install
# with `cmake --install --prefix DIR` is right wherever DIR is.
file(RELATIVE_PATH TENSORPC_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${CMAKE_CURRENT_LIST_DIR}/tensorpc.pc.in ${PROJECT_BINARY_DIR}/tensorpc.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tensorpc.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
