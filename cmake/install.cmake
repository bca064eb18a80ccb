# install.cmake: what `cmake --install` puts in place. Included once from
# the top CMakeLists.txt, after every program's target exists.
#
#   <prefix>/bin/                     corral, corral-gateway, corral-scheduler,
#                                     corral-registry, corral-runner, corral-node (the
#                                     scheduler finds the runner beside it)
#   <prefix>/lib/corral/              backend-cuda.so when the build has CUDA
#                                     (component `cuda`): the runner looks
#                                     for it in ../lib/corral beside its
#                                     bin/, and loads it only for a plan
#                                     with GPU layers. The folder exists
#                                     in every install (component runtime).
#   <prefix>/lib/systemd/system/      corral-{gateway,scheduler,registry,node}
#                                     .service and corral.target, ExecStart=
#                                     naming <prefix>/bin (filled in at
#                                     install time, so --prefix is honoured)
#   <prefix>/lib/sysusers.d/corral.conf   the `corral` system user
#   <prefix>/share/corral/corral.env  example for /etc/corral/corral.env
#   <prefix>/share/corral/node.env    example for a GPU host's
#                                     /etc/corral/node.env
#   <prefix>/share/doc/corral/deploy.md
#
# The unit dir and the sysusers dir can be moved with CORRAL_SYSTEMD_UNITDIR
# and CORRAL_SYSUSERSDIR (absolute, or relative to the prefix). systemd reads
# units from /usr/lib/systemd/system and /usr/local/lib/systemd/system, so
# the default prefixes need neither.
include(GNUInstallDirs)

set(CORRAL_SYSTEMD_UNITDIR "lib/systemd/system" CACHE STRING
    "Where the systemd units are installed (relative = under the prefix)")
set(CORRAL_SYSUSERSDIR "lib/sysusers.d" CACHE STRING
    "Where the sysusers.d entry for the corral user is installed")

set(CORRAL_INSTALL_PROGRAMS corral corral-gateway corral-scheduler
    corral-registry corral-runner corral-node)
foreach(prog ${CORRAL_INSTALL_PROGRAMS})
  if(NOT TARGET ${prog})
    message(FATAL_ERROR "install.cmake: no target ${prog}; include this file "
                        "after every add_subdirectory")
  endif()
endforeach()
install(TARGETS ${CORRAL_INSTALL_PROGRAMS}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
# lib/corral is fixed relative to bin/ (not CMAKE_INSTALL_LIBDIR, which
# may be lib/x86_64-linux-gnu): the runner finds it from its own path.
install(DIRECTORY DESTINATION lib/corral COMPONENT runtime)
if(TARGET corral_backend_cuda)
  install(TARGETS corral_backend_cuda LIBRARY DESTINATION lib/corral COMPONENT cuda)
endif()

set(CORRAL_UNIT_SRC ${CMAKE_SOURCE_DIR}/deploy/systemd)
install(FILES ${CORRAL_UNIT_SRC}/corral.target
        DESTINATION ${CORRAL_SYSTEMD_UNITDIR} COMPONENT systemd)
install(FILES ${CORRAL_UNIT_SRC}/corral.sysusers
        DESTINATION ${CORRAL_SYSUSERSDIR} RENAME corral.conf
        COMPONENT systemd)
install(FILES ${CORRAL_UNIT_SRC}/corral.env ${CORRAL_UNIT_SRC}/node.env
        DESTINATION ${CMAKE_INSTALL_DATADIR}/corral COMPONENT systemd)
install(FILES ${CMAKE_SOURCE_DIR}/docs/deploy.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT doc)

# The .service files name their binary by absolute path. The prefix is only
# final at install time (`cmake --install build --prefix /opt/corral`), so
# @CORRAL_BINDIR@ is filled in then, from the install script's own
# CMAKE_INSTALL_PREFIX.
install(CODE "
  set(CORRAL_UNIT_SRC \"${CORRAL_UNIT_SRC}\")
  set(CORRAL_UNIT_DEST \"${CORRAL_SYSTEMD_UNITDIR}\")
  set(CORRAL_BINDIR_REL \"${CMAKE_INSTALL_BINDIR}\")
" COMPONENT systemd)
install(CODE [==[
  if(IS_ABSOLUTE "${CORRAL_BINDIR_REL}")
    set(bindir "${CORRAL_BINDIR_REL}")
  else()
    set(bindir "${CMAKE_INSTALL_PREFIX}/${CORRAL_BINDIR_REL}")
  endif()
  if(IS_ABSOLUTE "${CORRAL_UNIT_DEST}")
    set(unitdir "${CORRAL_UNIT_DEST}")
  else()
    set(unitdir "${CMAKE_INSTALL_PREFIX}/${CORRAL_UNIT_DEST}")
  endif()
  foreach(svc corral-gateway corral-scheduler corral-registry corral-node)
    file(READ "${CORRAL_UNIT_SRC}/${svc}.service.in" text)
    string(REPLACE "@CORRAL_BINDIR@" "${bindir}" text "${text}")
    if(text MATCHES "@[A-Z_]+@")
      message(FATAL_ERROR "${svc}.service.in: unknown placeholder ${CMAKE_MATCH_0}")
    endif()
    set(dest "$ENV{DESTDIR}${unitdir}/${svc}.service")
    message(STATUS "Installing: ${dest}")
    file(MAKE_DIRECTORY "$ENV{DESTDIR}${unitdir}")
    file(WRITE "${dest}" "${text}")
    list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${dest}")
  endforeach()
]==] COMPONENT systemd)
