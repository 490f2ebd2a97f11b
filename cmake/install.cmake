# What `cmake --install` puts under the prefix (docs/api.md, "Installing"):
#   include/qhexrt/          the public headers (C: qhexrt.h; C++: *.hpp)
#   lib/libqhexrt.so*        the runtime library (SONAME libqhexrt.so.${QHX_ABI_VERSION})
#   lib/libqhexrt_export.so* making and checking bundles, the doctor (qhexrt/export.hpp, doctor.hpp)
#   lib/cmake/qhexrt/        the CMake package: find_package(qhexrt 0.1), target qhexrt::qhexrt
#   lib/pkgconfig/qhexrt.pc  pkg-config --cflags --libs qhexrt
#   bin/                     the tools (linked statically against the library)
# tests/package/run.sh installs a build into a temporary prefix and builds programs against it.
include(CMakePackageConfigHelpers)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/qhexrt
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT library)
install(TARGETS qhexrt_shared qhexrt_export_shared EXPORT qhexrtTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library NAMELINK_COMPONENT library)
install(TARGETS qhx_generate qhx_export qhx_tokenize qhx_bench qhx_doctor qhx_chat
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tools)
if(TARGET qhx_serve)
  install(TARGETS qhx_serve RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tools)
endif()

set(QHX_CMAKE_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/qhexrt)
install(EXPORT qhexrtTargets NAMESPACE qhexrt:: FILE qhexrtTargets.cmake
        DESTINATION ${QHX_CMAKE_PACKAGE_DIR} COMPONENT library)
# The API version, for a consumer that wants to check it at configure time.
file(STRINGS ${PROJECT_SOURCE_DIR}/include/qhexrt/qhexrt.h _qhx_api_line REGEX "^#define QHX_API_VERSION ")
string(REGEX REPLACE "^#define QHX_API_VERSION ([0-9]+).*" "\\1" QHX_C_API_VERSION "${_qhx_api_line}")
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/qhexrtConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/qhexrtConfig.cmake
                              INSTALL_DESTINATION ${QHX_CMAKE_PACKAGE_DIR})
# Before 1.0 a minor version may change the C++ API (docs/api.md): 0.1 accepts 0.1.x only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/qhexrtConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/qhexrtConfig.cmake ${PROJECT_BINARY_DIR}/qhexrtConfigVersion.cmake
        DESTINATION ${QHX_CMAKE_PACKAGE_DIR} COMPONENT library)

# pkg-config: the prefix is found from the .pc file's own location.
file(RELATIVE_PATH QHX_PC_PREFIX_FROM_PCDIR "/qhx_prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/qhx_prefix")
string(REGEX REPLACE "/$" "" QHX_PC_PREFIX_FROM_PCDIR "${QHX_PC_PREFIX_FROM_PCDIR}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/qhexrt.pc.in ${PROJECT_BINARY_DIR}/qhexrt.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/qhexrt.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT library)
