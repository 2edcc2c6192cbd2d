# Installs the build into a scratch prefix and fails when an installed library
# holds a symbol of the EP harness (conformance suite, reference path, test
# data, the bench runner): those belong in the epkit binary only. The binary
# itself is installed too and does hold them (it runs `epkit test ep`), so only
# the libraries are read. The harness library of the build tree must match the
# same pattern, so that a renamed namespace cannot make this pass vacuously.
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX}
  RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()

set(harness_pattern "epkit::[A-Za-z0-9_:]*(conformance|reference|testdata|TestInput|StoreBootstrap|run_ep_bench)")

function(harness_symbols library out)
  execute_process(COMMAND ${NM} -C --defined-only ${library}
    RESULT_VARIABLE rc OUTPUT_VARIABLE symbols ERROR_VARIABLE err)
  if(rc)
    message(FATAL_ERROR "nm ${library} failed: ${err}")
  endif()
  string(REGEX MATCHALL "[^\n]*${harness_pattern}[^\n]*" found "${symbols}")
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

harness_symbols(${HARNESS_LIBRARY} control)
if(NOT control)
  message(FATAL_ERROR "the pattern finds no harness symbol in ${HARNESS_LIBRARY}: update it")
endif()

file(GLOB_RECURSE libraries ${PREFIX}/*.a ${PREFIX}/*.so ${PREFIX}/*.so.*)
if(NOT libraries)
  message(FATAL_ERROR "no library was installed under ${PREFIX}")
endif()
foreach(library ${libraries})
  harness_symbols(${library} found)
  if(found)
    list(GET found 0 first)
    message(FATAL_ERROR "${library} holds harness symbols, e.g. ${first}")
  endif()
  message("${library}: no harness symbol")
endforeach()
