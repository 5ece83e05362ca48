# attn_add_chapter(): everything one chapter needs, in one call.
#
#   attn_add_chapter(NN name
#     [SOURCES  file...]      chapter code the book presents but learners do not write (data, fast kernels);
#                             compiled once into chNN_name_core. It must not call the chapter's contract.
#     [CUDA_SOURCES file...]  .cu files, built only when CUDA was found (see the top-level CMakeLists.txt)
#     [DEPENDS  NN_name...]   earlier chapters whose *solutions* this chapter builds on
#     [LIBS     target...]    further libraries (for example CUDA::cublas)
#     [TRACK_CUDA_SOURCES file...]  .cu files of the two tracks, named relative to exercises/NN_name/ and
#                             solutions/NN_name/ (a kernel the learner writes); built only with CUDA
#     [GPU_TESTS]             some test cases need a GPU: where there is none they are skipped, with the
#                             reason (tests/support/gpu_skip.hpp); ctest reports them as skipped, not passed
#     [THREADED]              the chapter runs threads of its own: its solution tests also carry the label
#                             "threads" and build with attn_threaded_tests (the tsan preset runs them)
#     [SANITIZER_RUN_ARGS arg...]  under ATTN_SANITIZE, the "runs with its defaults" test runs with these
#                             options instead (a chapter that trains for seconds would take minutes there)
#     [TEST_LIBS target...]   further libraries of the chapter's test programs (e.g. chapter 04's counting
#                             allocator, ch04_heap_counter, to bound a kernel's heap)
#     [PROGRAM_LIBS target...])  further libraries of the chapter's two programs
#
# It is called from the chapter's own chapters/NN_name/CMakeLists.txt, which the top-level CMakeLists.txt adds
# for each entry of chapters/manifest.json (in that file's order): SOURCES are named relative to that folder.
#
# For chapter 01 intuition it makes:
#   ch01_intuition_core        the chapter's own sources (or an interface target when there are none)
#   ch01_intuition_solution    solutions/01_intuition/intuition.cpp   the reference answers
#   ch01_intuition_exercise    exercises/01_intuition/intuition.cpp   the learner's skeleton
#   ch01_intuition             the chapter executable, linked with the solutions (main.cpp, and bench.cpp with the
#                              chapter's Google Benchmarks when the chapter has one)
#   ch01_intuition_exercise_run  ... the same program linked with the learner's code (bin/ch01_intuition_exercise)
#   ch01_intuition_{solution,exercise}_test  tests/01_intuition_test.cpp compiled once, linked per track,
#                              registered with ctest as "solution:<case>" / "exercise:<case>",
#                              labelled with the track and "ch01".
#   ch01_intuition_core_test   tests/01_intuition_core_test.cpp, when the chapter has one: the test of the
#                              chapter's own code (kernels, helpers, data: not exercises), linked with the
#                              solutions and registered on the solution track only (it cannot fail against the
#                              skeletons, so it is not built twice)
#   attn_book_chapters         (a list) the book runs every chapter executable with --book DIR
# Both tracks see the same header chapters/01_intuition/intuition.hpp, the chapter's contract.
# A chapter's exercise library builds on the solutions of the chapters before it, so a learner's
# chapter N depends only on their own chapter N.
function(attn_add_chapter NN name)
  cmake_parse_arguments(PARSE_ARGV 2 ARG "GPU_TESTS;THREADED" ""
                        "SOURCES;CUDA_SOURCES;DEPENDS;LIBS;TRACK_CUDA_SOURCES;SANITIZER_RUN_ARGS;TEST_LIBS;PROGRAM_LIBS")
  set(stem ${NN}_${name})
  set(ch ch${NN}_${name})
  set(root ${PROJECT_SOURCE_DIR})
  foreach(required chapters/${stem}/${name}.hpp chapters/${stem}/main.cpp exercises/${stem}/${name}.cpp
                   solutions/${stem}/${name}.cpp tests/${stem}_test.cpp exercises/${stem}/HINTS.md)
    if(NOT EXISTS ${root}/${required})
      message(FATAL_ERROR "attn_add_chapter(${NN} ${name}): ${required} is missing")
    endif()
  endforeach()

  set(deps "")
  foreach(dep IN LISTS ARG_DEPENDS)
    list(APPEND deps ch${dep}_solution)
  endforeach()

  # --- what the chapter presents but does not ask for: compiled once, shared by both tracks ---
  set(sources ${ARG_SOURCES})
  if(ATTN_HAVE_CUDA)
    list(APPEND sources ${ARG_CUDA_SOURCES})
  elseif(ARG_CUDA_SOURCES)
    message(STATUS "attn: ${ch}: CUDA sources skipped (no CUDA compiler)")
  endif()
  if(sources)
    add_library(${ch}_core STATIC ${sources})
    attn_strict_warnings(${ch}_core)
    attn_use_pch(${ch}_core)
    target_include_directories(${ch}_core PUBLIC ${root}/chapters)
    target_link_libraries(${ch}_core PUBLIC attn_common ${deps} ${ARG_LIBS})
    target_compile_definitions(${ch}_core PRIVATE ATTN_HAVE_CUDA=$<BOOL:${ATTN_HAVE_CUDA}>)
    attn_cuda_warnings(${ch}_core)
  else()
    add_library(${ch}_core INTERFACE)
    target_include_directories(${ch}_core INTERFACE ${root}/chapters)
    target_link_libraries(${ch}_core INTERFACE attn_common ${deps} ${ARG_LIBS})
  endif()
  target_compile_definitions(${ch}_core INTERFACE ATTN_HAVE_CUDA=$<BOOL:${ATTN_HAVE_CUDA}>)

  # --- the two tracks: one library each, the same contract ---
  foreach(track solution exercise)
    set(track_sources ${root}/${track}s/${stem}/${name}.cpp)
    if(ATTN_HAVE_CUDA)
      foreach(cu IN LISTS ARG_TRACK_CUDA_SOURCES)
        list(APPEND track_sources ${root}/${track}s/${stem}/${cu})
      endforeach()
    endif()
    add_library(${ch}_${track} STATIC ${track_sources})
    target_link_libraries(${ch}_${track} PUBLIC ${ch}_core)
    if(track STREQUAL "solution")
      attn_cuda_warnings(${ch}_${track})
    endif()
    attn_use_pch(${ch}_${track})
    if(track STREQUAL "exercise")
      attn_learner_warnings(${ch}_${track})
    else()
      attn_strict_warnings(${ch}_${track})
    endif()
  endforeach()

  # --- the executable: main.cpp compiled once, linked against each track ---
  # A chapter's benchmarks live beside its story in bench.cpp, when it has one (the README's layout: main.cpp the
  # story, bench.cpp its benchmarks).
  set(main_sources ${root}/chapters/${stem}/main.cpp)
  if(EXISTS ${root}/chapters/${stem}/bench.cpp)
    list(APPEND main_sources ${root}/chapters/${stem}/bench.cpp)
  endif()
  add_library(${ch}_main OBJECT ${main_sources})
  target_link_libraries(${ch}_main PUBLIC ${ch}_core)
  attn_strict_warnings(${ch}_main)
  attn_use_pch(${ch}_main)
  target_compile_definitions(${ch}_main PRIVATE ATTN_CHAPTER_STEM="${stem}")
  add_executable(${ch} $<TARGET_OBJECTS:${ch}_main>)
  target_link_libraries(${ch} PRIVATE ${ch}_main ${ch}_solution)
  add_executable(${ch}_exercise_run $<TARGET_OBJECTS:${ch}_main>)
  target_link_libraries(${ch}_exercise_run PRIVATE ${ch}_main ${ch}_exercise)
  foreach(program ${ch} ${ch}_exercise_run)
    target_link_libraries(${program} PRIVATE ${ARG_PROGRAM_LIBS})
  endforeach()
  set_target_properties(${ch}_exercise_run PROPERTIES OUTPUT_NAME ${ch}_exercise)

  # --- the tests: compiled once, linked per track, compared with tests/oracle only ---
  add_library(${ch}_test_cases OBJECT ${root}/tests/${stem}_test.cpp)
  target_link_libraries(${ch}_test_cases PUBLIC ${ch}_core attn_test_support)
  attn_strict_warnings(${ch}_test_cases)
  attn_use_pch(${ch}_test_cases)
  foreach(track solution exercise)
    set(test_exe ${ch}_${track}_test)
    add_executable(${test_exe} $<TARGET_OBJECTS:${ch}_test_cases>)
    target_link_libraries(${test_exe} PRIVATE ${ch}_test_cases ${ch}_${track} attn_test_main ${ARG_TEST_LIBS})
    set(labels "${track};ch${NN}")
    if(ARG_THREADED)
      list(APPEND labels threads)
    endif()
    attn_discover_tests(${test_exe} "${track}:" "${labels}")
  endforeach()
  if(ARG_THREADED)
    add_dependencies(attn_threaded_tests ${ch}_solution_test)
  endif()
  add_dependencies(attn_exercise_tests ${ch}_exercise_test)
  add_dependencies(attn_solution_tests ${ch}_solution_test ${ch}) # the CLI tests run the executable

  # --- the test of the chapter's own code, when it has one: solution track only ---
  if(EXISTS ${root}/tests/${stem}_core_test.cpp)
    add_executable(${ch}_core_test ${root}/tests/${stem}_core_test.cpp)
    target_link_libraries(${ch}_core_test PRIVATE ${ch}_solution attn_test_support attn_test_main ${ARG_TEST_LIBS})
    attn_strict_warnings(${ch}_core_test)
    attn_use_pch(${ch}_core_test)
    set(labels "solution;ch${NN}")
    if(ARG_THREADED)
      list(APPEND labels threads)
      add_dependencies(attn_threaded_tests ${ch}_core_test)
    endif()
    attn_discover_tests(${ch}_core_test "solution:" "${labels}" ${ARG_GPU_TESTS})
    add_dependencies(attn_solution_tests ${ch}_core_test)
  endif()

  # --- the executable's own behaviour: runs with its defaults, refuses a bad option with status 2 ---
  # The checks of what a program prints (its width, title and words, and every option fed bad values) carry the
  # label "output": the sanitizer builds leave them out (they exercise printing, not memory or threads; the
  # programs' own runs, "runs with its defaults", stay in).
  if(ATTN_SANITIZE AND ARG_SANITIZER_RUN_ARGS)
    string(JOIN " " shorter ${ARG_SANITIZER_RUN_ARGS})
    attn_cli_test(${ch} "runs with ${shorter} (its defaults, shortened for the sanitizers)" STATUS 0
                  ARGS --no-color ${ARG_SANITIZER_RUN_ARGS})
  else()
    attn_cli_test(${ch} "runs with its defaults" STATUS 0 ARGS --no-color)
  endif()
  attn_cli_test(${ch} "rejects an unknown option with usage and status 2" STATUS 2 MATCHES "--no-such-option"
                ARGS --no-such-option)
  set(width_test "solution:${ch} fits 100 columns in every mode and restarts itself as on a CPU OpenBLAS slows")
  set(width_args "")
  if(ATTN_SANITIZE AND ARG_SANITIZER_RUN_ARGS)  # the same shorter run as "runs with its defaults" above
    set(width_args -- ${ARG_SANITIZER_RUN_ARGS})
  endif()
  add_test(NAME ${width_test} COMMAND ${root}/cmake/check_output_width.sh $<TARGET_FILE:attn_output_width>
                                      $<TARGET_FILE:attn_machine> $<TARGET_FILE:${ch}> ${width_args})
  set_tests_properties(${width_test} PROPERTIES LABELS "solution;ch${NN};output")
  set(title_test "solution:${ch} starts its output with its title line, the manifest's (Chapter ${NN}: ...)")
  set(short_run "")
  if(ATTN_SANITIZE AND ARG_SANITIZER_RUN_ARGS)  # the same shorter run as "runs with its defaults" above
    set(short_run ${ARG_SANITIZER_RUN_ARGS})
  endif()
  add_test(NAME ${title_test} COMMAND ${root}/cmake/check_course_words.py --title $<TARGET_FILE:${ch}> ${short_run})
  set_tests_properties(${title_test} PROPERTIES LABELS "solution;ch${NN};output")
  set(words_test "solution:${ch} prints, for the book, only the course's own words (no workshop labels)")
  add_test(NAME ${words_test} COMMAND ${root}/cmake/check_course_words.py --chapter $<TARGET_FILE:${ch}> ${short_run})
  set_tests_properties(${words_test} PROPERTIES LABELS "solution;ch${NN};output")
  # Every option its --help lists, fed a table of bad values: status 2 and the option named, every time.
  set(fuzz "solution:${ch} refuses bad values of every option with status 2, naming the option")
  add_test(NAME ${fuzz} COMMAND ${root}/cmake/cli_fuzz.sh $<TARGET_FILE:${ch}>)
  set_tests_properties(${fuzz} PROPERTIES LABELS "solution;ch${NN};output" TIMEOUT 300)

  set_property(GLOBAL APPEND PROPERTY ATTN_CHAPTERS ${ch})
endfunction()

# attn_cli_test(chNN_name "sentence" STATUS code [MATCHES regex] ARGS args...)
# A ctest case "solution:chNN_name <sentence>" that runs the chapter executable (solution track) with
# ARGS and checks its exit status and, optionally, that its output matches the regex.
function(attn_cli_test ch sentence)
  cmake_parse_arguments(PARSE_ARGV 2 ARG "" "STATUS;MATCHES" "ARGS")
  string(REGEX MATCH "^ch([0-9][0-9])_" _ ${ch})
  set(name "solution:${ch} ${sentence}")
  add_test(NAME ${name} COMMAND ${PROJECT_SOURCE_DIR}/cmake/run_cli_test.sh ${ARG_STATUS} "${ARG_MATCHES}"
                                $<TARGET_FILE:${ch}> ${ARG_ARGS})
  set_tests_properties(${name} PROPERTIES LABELS "solution;ch${CMAKE_MATCH_1}")
endfunction()

# attn_discover_tests(exe prefix labels): registers every doctest case of \p exe with ctest as
# "<prefix><case name>" and labels them (e.g. "solution;ch01"), so `ctest -L solution -L ch01` selects them.
# A case that skips itself (attn::test::skip, or before the run: tests/support/results.hpp) prints a line
# "skipped: <reason>", and ctest reports it as skipped, not passed; `./course test` lists the reasons.
function(attn_discover_tests exe prefix labels)
  # A line that starts with "skipped: " (in ctest's regular expressions ^ is the start of the whole output).
  set(skip " SKIP_REGULAR_EXPRESSION \"(^|\\n)skipped: \"")
  doctest_discover_tests(${exe} TEST_PREFIX "${prefix}" TEST_LIST ${exe}_CASES)
  # The labels are set in ctest after doctest's own include file has listed the cases.
  set(label_file ${CMAKE_CURRENT_BINARY_DIR}/${exe}_labels.cmake)
  string(CONCAT content "if(DEFINED ${exe}_CASES)\n"
                       "  set_tests_properties(\${${exe}_CASES} PROPERTIES LABELS \"${labels}\"${skip})\n"
                       "endif()\n")
  if(prefix STREQUAL "exercise:")
    # Suites named "NN_name: chapter code" test what the chapter gives (fast kernels, checks), not the
    # learner's functions: against the skeletons they would pass, so the exercise track disables them.
    string(APPEND content "set(attn_test_exe \"$<TARGET_FILE:${exe}>\")\n"
                          "include(\"${PROJECT_SOURCE_DIR}/cmake/disable_chapter_code_tests.cmake\")\n")
  endif()
  file(GENERATE OUTPUT ${label_file} CONTENT "${content}")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${label_file})
endfunction()

# attn_cuda_warnings(target): the course's own .cu files: nvcc's warnings and the host compiler's, as
# errors when ATTN_WERROR is ON (-Wpedantic and -Wconversion stay off: nvcc's generated host stubs trip them).
function(attn_cuda_warnings target)
  if(ATTN_HAVE_CUDA)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wshadow>
      $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${ATTN_WERROR}>>:--Werror=all-warnings>)
  endif()
endfunction()

add_custom_target(attn_exercise_tests)
add_custom_target(attn_solution_tests)
add_custom_target(attn_threaded_tests)  # the tests of chapters marked THREADED, and common's (tsan preset)
