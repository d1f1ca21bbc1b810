# The package: the umbrella target minidp::minidp and its component targets (aliases for add_subdirectory
# users, exported names for find_package users), and the install rules. Headers install under
# include/minidp keeping the tree's paths, so #include "framework/ops/ops.h" works from an installation.
set(MINIDP_COMPONENTS kernels io framework data models trainer)
foreach(component ${MINIDP_COMPONENTS})
  set_target_properties(minidp_${component} PROPERTIES EXPORT_NAME ${component})
  add_library(minidp::${component} ALIAS minidp_${component})
endforeach()
if(TARGET minidp_testing)
  set_target_properties(minidp_testing PROPERTIES EXPORT_NAME testing)
  add_library(minidp::testing ALIAS minidp_testing)
endif()

# Everything a program that trains needs: the trainer and, through it, models, data, framework, kernels.
add_library(minidp INTERFACE)
target_link_libraries(minidp INTERFACE minidp_trainer)
add_library(minidp::minidp ALIAS minidp)

if(NOT MINIDP_INSTALL)
  return()
endif()

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
set(MINIDP_INCLUDE_DIR ${CMAKE_INSTALL_INCLUDEDIR}/minidp)
set(MINIDP_CONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/minidp)

set(targets minidp)
foreach(component ${MINIDP_COMPONENTS})
  list(APPEND targets minidp_${component})
endforeach()
install(TARGETS ${targets} EXPORT minidpTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${MINIDP_INCLUDE_DIR})
install(EXPORT minidpTargets NAMESPACE minidp:: DESTINATION ${MINIDP_CONFIG_DIR})
if(TARGET minidp_testing)
  install(TARGETS minidp_testing EXPORT minidpTestingTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          INCLUDES DESTINATION ${MINIDP_INCLUDE_DIR})
  install(EXPORT minidpTestingTargets NAMESPACE minidp:: DESTINATION ${MINIDP_CONFIG_DIR})
endif()
foreach(program minidp-train minidp-bench minidp-bench-allreduce)
  if(TARGET ${program})
    install(TARGETS ${program} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()

# Public headers: every header of the library folders (the tests' are not installed).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/base ${PROJECT_SOURCE_DIR}/kernels ${PROJECT_SOURCE_DIR}/framework ${PROJECT_SOURCE_DIR}/data
                  ${PROJECT_SOURCE_DIR}/models ${PROJECT_SOURCE_DIR}/train
        DESTINATION ${MINIDP_INCLUDE_DIR}
        FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh")

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/minidpConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/minidpConfig.cmake INSTALL_DESTINATION ${MINIDP_CONFIG_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/minidpConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/minidpConfig.cmake ${PROJECT_BINARY_DIR}/minidpConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake
        DESTINATION ${MINIDP_CONFIG_DIR})
