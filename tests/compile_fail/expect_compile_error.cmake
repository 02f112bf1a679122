# Builds TARGET in BUILD_DIR and passes only when the build fails and its output holds every one of
# PATTERNS (a ;-list of regular expressions).
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${TARGET}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(APPEND out "${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "${TARGET} compiled, but it must be rejected")
endif()
foreach(pattern IN LISTS PATTERNS)
  if(NOT out MATCHES "${pattern}")
    message(FATAL_ERROR "${TARGET} failed to compile without the message \"${pattern}\":\n${out}")
  endif()
endforeach()
list(LENGTH PATTERNS n)
message(STATUS "${TARGET} is rejected with all ${n} expected messages")
