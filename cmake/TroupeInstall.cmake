# `cmake --install build --prefix P` installs:
#   P/bin/troupe                                 the command
#   P/share/troupe/models/troupe-fortunes/       the embedded model (found from bin/troupe)
#   P/include/troupe/{runtime,actors,cpu,...}/   the public headers, in the source layout
#   P/lib/libtroupe_*.a                          the libraries (static)
#   P/lib/cmake/troupe/                          troupeConfig.cmake, its version file, the
#                                                exported targets and FindCAF.cmake
# so that a host application can embed the engine in its own actor system:
#   find_package(troupe REQUIRED)
#   target_link_libraries(app PRIVATE troupe::troupe)
# tests/install/ builds such an application against an install in a temporary prefix.
include(CMakePackageConfigHelpers)

# troupe::troupe: what an embedding application links (Engine, LLM, the backends).
add_library(troupe_engine INTERFACE)
target_link_libraries(troupe_engine INTERFACE troupe_actors)
set_target_properties(troupe_engine PROPERTIES EXPORT_NAME troupe)
add_library(troupe::troupe ALIAS troupe_engine)
# Code that links the installed package finds the installed model wherever it runs from
# (runtime/checkpoint/default_model.hpp registers it).
target_compile_definitions(troupe_engine INTERFACE
  "$<INSTALL_INTERFACE:TROUPE_INSTALLED_MODEL_DIR=\"$<INSTALL_PREFIX>/${CMAKE_INSTALL_DATADIR}/troupe/models/troupe-fortunes\">")

set(_troupe_libs troupe_warnings troupe_runtime troupe_engine)
foreach(_t troupe_cpu troupe_transport troupe_transport_nccl troupe_cuda troupe_actors)
  if(TARGET ${_t})
    list(APPEND _troupe_libs ${_t})
  endif()
endforeach()
install(TARGETS ${_troupe_libs} EXPORT troupeTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
set(_troupe_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/troupe)
install(EXPORT troupeTargets NAMESPACE troupe:: DESTINATION ${_troupe_cmake_dir})

set(_troupe_header_dirs runtime actors cpu transport)
if(TARGET troupe_cuda)
  list(APPEND _troupe_header_dirs cuda)
endif()
# The OpenAI server (actors/api_server, request_sink, transport/http: the troupe_server and
# troupe_http libraries, which need Boost) belongs to the command and is not installed.
foreach(_d ${_troupe_header_dirs})
  install(DIRECTORY ${TROUPE_SOURCE_DIR}/${_d} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/troupe
          FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h"
          PATTERN "api_server.hpp" EXCLUDE PATTERN "request_sink.hpp" EXCLUDE
          PATTERN "http" EXCLUDE)
endforeach()
install(DIRECTORY ${TROUPE_SOURCE_DIR}/models/troupe-fortunes
        DESTINATION ${CMAKE_INSTALL_DATADIR}/troupe/models)

set(TROUPE_INSTALL_HAS_TRANSPORT OFF)
if(TARGET troupe_transport)
  set(TROUPE_INSTALL_HAS_TRANSPORT ON)
endif()
set(TROUPE_INSTALL_HAS_CUDA OFF)
if(TARGET troupe_cuda)
  set(TROUPE_INSTALL_HAS_CUDA ON)
endif()
configure_package_config_file(${TROUPE_SOURCE_DIR}/cmake/troupeConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/troupeConfig.cmake INSTALL_DESTINATION ${_troupe_cmake_dir}
  PATH_VARS CMAKE_INSTALL_DATADIR)
# 0.x: a minor version may break the API, so only the same minor version is compatible.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/troupeConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/troupeConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/troupeConfigVersion.cmake
              ${TROUPE_SOURCE_DIR}/cmake/FindCAF.cmake
        DESTINATION ${_troupe_cmake_dir})
