# A chapter's MPI program (chapters 13 and 15): Open MPI is optional. Without it the program is skipped with a
# message and the rest of the chapter builds.

# attn_add_mpi_program(NN name SOURCES file...): when Open MPI is installed, builds chNN_name_mpi (the reference
# solutions) and chNN_name_mpi_exercise (the learner's code) from SOURCES (named relative to the chapter's
# folder) and sets ATTN_HAVE_MPI to ON in the caller's scope (OFF, with a warning, without Open MPI). Its tests
# go through attn_mpi_test().
function(attn_add_mpi_program NN name)
  cmake_parse_arguments(PARSE_ARGV 2 ARG "" "" "SOURCES")
  set(ch ch${NN}_${name})
  find_package(MPI COMPONENTS CXX QUIET)
  find_program(ATTN_MPIRUN mpirun)
  if(NOT MPI_CXX_FOUND OR NOT ATTN_MPIRUN)
    message(WARNING "attn: Open MPI not found (libopenmpi-dev, openmpi-bin): ${ch}_mpi is SKIPPED "
                    "(the rest of chapter ${NN} builds; ./course setup installs Open MPI)")
    set(ATTN_HAVE_MPI OFF PARENT_SCOPE)
    return()
  endif()
  add_library(${ch}_mpi_main OBJECT ${ARG_SOURCES})
  target_link_libraries(${ch}_mpi_main PUBLIC ${ch}_core MPI::MPI_CXX)
  attn_strict_warnings(${ch}_mpi_main)
  foreach(track solution exercise)
    add_executable(${ch}_mpi_${track} $<TARGET_OBJECTS:${ch}_mpi_main>)
    target_link_libraries(${ch}_mpi_${track} PRIVATE ${ch}_mpi_main ${ch}_${track})
  endforeach()
  set_target_properties(${ch}_mpi_solution PROPERTIES OUTPUT_NAME ${ch}_mpi)
  set_target_properties(${ch}_mpi_exercise PROPERTIES OUTPUT_NAME ${ch}_mpi_exercise)
  add_dependencies(attn_solution_tests ${ch}_mpi_solution)
  set_property(GLOBAL APPEND PROPERTY ATTN_MPI_PROGRAMS ${ch}_mpi)
  set(ATTN_HAVE_MPI ON PARENT_SCOPE)
endfunction()

# attn_mpi_test(NN name "sentence" NP np [STATUS code] [MATCHES regex] [FAIL_REGEX regex] ARGS args...)
# A ctest case "solution:chNN_name_mpi <sentence>" that runs chNN_name_mpi on np ranks with the chapter's
# launcher (its manifest entry's mpi.launcher: --oversubscribe, and mpirun's --timeout so a hang fails), with
# STATUS: through cmake/run_cli_test.sh (the exit status, and the output matching MATCHES); without: the run
# must pass and its output must not match FAIL_REGEX. Labelled solution, chNN and mpi. LeakSanitizer is off
# (under the asan preset it would report Open MPI's own allocations at exit).
function(attn_mpi_test NN name sentence)
  cmake_parse_arguments(PARSE_ARGV 3 ARG "" "NP;STATUS;MATCHES;FAIL_REGEX" "ARGS")
  set(ch ch${NN}_${name})
  if(NOT TARGET ${ch}_mpi_solution)
    return()
  endif()
  attn_manifest_get(${NN} mpi launcher launcher)
  set(test "solution:${ch}_mpi ${sentence}")
  set(run ${PROJECT_SOURCE_DIR}/${launcher} ${ARG_NP} $<TARGET_FILE:${ch}_mpi_solution> ${ARG_ARGS})
  if(DEFINED ARG_STATUS)
    add_test(NAME ${test} COMMAND ${PROJECT_SOURCE_DIR}/cmake/run_cli_test.sh ${ARG_STATUS} "${ARG_MATCHES}" ${run})
  else()
    add_test(NAME ${test} COMMAND ${run})
  endif()
  set_tests_properties(${test} PROPERTIES LABELS "solution;ch${NN};mpi" TIMEOUT 120
                                          ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0;ATTN_MPI_TIMEOUT=100")
  if(ARG_FAIL_REGEX)
    set_tests_properties(${test} PROPERTIES FAIL_REGULAR_EXPRESSION "${ARG_FAIL_REGEX}")
  endif()
endfunction()
