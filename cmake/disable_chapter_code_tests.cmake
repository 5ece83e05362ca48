# Included by ctest (from attn_discover_tests' label file) for an exercise-track test executable,
# attn_test_exe: its cases in suites named "NN_name: chapter code" test the chapter's own code, not the
# learner's, so they would pass against the untouched skeletons. They are disabled on this track (ctest
# lists them as "Not Run (Disabled)"); the solution track runs them.
execute_process(COMMAND "${attn_test_exe}" "--test-suite=*: chapter code" --list-test-cases
                OUTPUT_VARIABLE attn_chapter_code RESULT_VARIABLE attn_result)
if(attn_result EQUAL 0)
  string(REPLACE "\n" ";" attn_chapter_code "${attn_chapter_code}")
  foreach(attn_case IN LISTS attn_chapter_code)
    if(NOT attn_case STREQUAL "" AND NOT attn_case MATCHES "^(\\[doctest\\]|=====)")
      set_tests_properties("exercise:${attn_case}" PROPERTIES DISABLED TRUE)
    endif()
  endforeach()
endif()
