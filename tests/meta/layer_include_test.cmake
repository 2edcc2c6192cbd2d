# Compiles a one-line source that includes HEADER with a layer's include
# folders (src/CMakeLists.txt, epkit_layer) and checks the outcome:
# EXPECT=fail for a header of a layer above (or one the layer does not name):
# the compiler must stop at that include with "No such file"; EXPECT=pass for
# a header of a layer below, so that a failure above is the layering and not
# a broken command line.
# -DCXX=compiler -DINCLUDES=dir|dir -DHEADER=path -DEXPECT=pass|fail -DWORK=dir
foreach(var CXX INCLUDES HEADER EXPECT WORK)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "layer_include_test: -D${var}= is missing")
  endif()
endforeach()
file(MAKE_DIRECTORY ${WORK})
string(MAKE_C_IDENTIFIER "${HEADER}" name)
set(source ${WORK}/${name}.cc)
file(WRITE ${source} "#include \"${HEADER}\"\n")
set(flags -std=c++20 -fsyntax-only)
string(REPLACE "|" ";" INCLUDES "${INCLUDES}")
foreach(dir ${INCLUDES})
  list(APPEND flags -I${dir})
endforeach()
execute_process(COMMAND ${CXX} ${flags} ${source} RESULT_VARIABLE rc OUTPUT_VARIABLE out
  ERROR_VARIABLE err)
if(EXPECT STREQUAL "fail")
  if(rc EQUAL 0)
    message(FATAL_ERROR "#include \"${HEADER}\" compiled with ${INCLUDES}: the layer sees a "
      "header it must not")
  endif()
  if(NOT err MATCHES "${HEADER}: No such file")
    message(FATAL_ERROR "#include \"${HEADER}\" failed, but not for want of the header:\n${err}")
  endif()
elseif(NOT rc EQUAL 0)
  message(FATAL_ERROR "#include \"${HEADER}\" (a layer below) did not compile:\n${err}")
endif()
