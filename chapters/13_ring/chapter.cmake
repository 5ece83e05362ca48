# Chapter 13's parts beyond attn_add_chapter(): the test of its given code (Ulysses), on the solution track
# only, and the MPI program with its ctest cases.

# Chapter 13's own code (no exercise in it): solution track only, labelled threads (its kernels run threads).
attn_add_core_test(13 ring THREADED)

# Chapter 13's MPI program (ch13_ring_mpi, and ch13_ring_mpi_exercise on the learner's code) and its ctest
# cases at np = 1 … 4. Open MPI is optional: without it this part is skipped with a message and the rest of
# the course (chapter 13's single-process program and tests included) builds as before.
find_package(MPI COMPONENTS CXX QUIET)
find_program(ATTN_MPIRUN mpirun)
if(NOT MPI_CXX_FOUND OR NOT ATTN_MPIRUN)
  message(WARNING "attn: Open MPI not found (libopenmpi-dev, openmpi-bin): chapter 13's MPI program is SKIPPED "
                  "(its single-process parts still build; ./course setup installs Open MPI)")
  return()
endif()
message(STATUS "attn: MPI found (${ATTN_MPIRUN}); chapter 13's MPI program is built")

# The program in three parts: transport (how the ranks reach one another), schedule (what each rank computes; it
# calls the exercises, so it is compiled with the program, once per track) and ring_mpi.cpp (the command line).
add_library(ch13_ring_mpi_main OBJECT ${PROJECT_SOURCE_DIR}/chapters/13_ring/ring_mpi.cpp
                                      ${PROJECT_SOURCE_DIR}/chapters/13_ring/schedule.cpp
                                      ${PROJECT_SOURCE_DIR}/chapters/13_ring/transport.cpp)
target_link_libraries(ch13_ring_mpi_main PUBLIC ch13_ring_core MPI::MPI_CXX)
attn_strict_warnings(ch13_ring_mpi_main)
foreach(track solution exercise)
  set(target ch13_ring_mpi_${track})
  add_executable(${target} $<TARGET_OBJECTS:ch13_ring_mpi_main>)
  target_link_libraries(${target} PRIVATE ch13_ring_mpi_main ch13_ring_${track})
endforeach()
# The chapter's tests run the MPI program of their own track (the learner's ring on the exercise track), so
# ./course check 13 runs the learner's ring across processes too; the test program finds it beside itself.
target_compile_definitions(ch13_ring_test_cases PRIVATE ATTN_CH13_MPIRUN="${PROJECT_SOURCE_DIR}/chapters/13_ring/mpirun.sh")
foreach(track solution exercise)
  add_dependencies(ch13_ring_${track}_test ch13_ring_mpi_${track})
endforeach()
set_target_properties(ch13_ring_mpi_solution PROPERTIES OUTPUT_NAME ch13_ring_mpi)
set_target_properties(ch13_ring_mpi_exercise PROPERTIES OUTPUT_NAME ch13_ring_mpi_exercise)
add_dependencies(attn_solution_tests ch13_ring_mpi_solution)

# Each np runs every check (ragged n, causal and not, both splits; Ulysses with h = P and P + 1 heads); a hang is killed by mpirun's --timeout and
# by ctest's TIMEOUT, so it fails instead of stalling CI.
foreach(np 1 2 3 4)
  set(name "solution:ch13_ring_mpi on ${np} ranks equals single-process flash and sends the formula's bytes, ring and Ulysses")
  # detect_leaks=0: under the asan preset, LeakSanitizer would report Open MPI's own allocations at exit.
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} -E env ATTN_MPI_TIMEOUT=100 ASAN_OPTIONS=detect_leaks=0
                                ${PROJECT_SOURCE_DIR}/chapters/13_ring/mpirun.sh ${np}
                                $<TARGET_FILE:ch13_ring_mpi_solution> --check)
  set_tests_properties(${name} PROPERTIES LABELS "solution;ch13;mpi" TIMEOUT 120 FAIL_REGULAR_EXPRESSION "FAIL")
endforeach()
set(name "solution:ch13_ring_mpi a rank's bad option stops the whole job with status 2")
add_test(NAME ${name} COMMAND ${PROJECT_SOURCE_DIR}/cmake/run_cli_test.sh 2 "--n"
                              ${PROJECT_SOURCE_DIR}/chapters/13_ring/mpirun.sh 2 $<TARGET_FILE:ch13_ring_mpi_solution>
                              --n 0)
set_tests_properties(${name} PROPERTIES LABELS "solution;ch13;mpi" TIMEOUT 120 ENVIRONMENT ASAN_OPTIONS=detect_leaks=0)
set(name "solution:ch13_ring_mpi refuses Ulysses with fewer heads than ranks, naming --heads, with status 2")
add_test(NAME ${name} COMMAND ${PROJECT_SOURCE_DIR}/cmake/run_cli_test.sh 2 "--heads 3: .*at least P = 4"
                              ${PROJECT_SOURCE_DIR}/chapters/13_ring/mpirun.sh 4 $<TARGET_FILE:ch13_ring_mpi_solution>
                              --heads 3 --n 64)
set_tests_properties(${name} PROPERTIES LABELS "solution;ch13;mpi" TIMEOUT 120 ENVIRONMENT ASAN_OPTIONS=detect_leaks=0)
set(name "solution:ch13_ring_mpi a rank that fails mid-ring stops the whole job with its message, no hang")
add_test(NAME ${name} COMMAND ${PROJECT_SOURCE_DIR}/cmake/run_cli_test.sh 1 "rank 1 of 3 failed: injected"
                              ${PROJECT_SOURCE_DIR}/chapters/13_ring/mpirun.sh 3 $<TARGET_FILE:ch13_ring_mpi_solution>
                              --check --fail-on-rank 1)
set_tests_properties(${name} PROPERTIES LABELS "solution;ch13;mpi" TIMEOUT 120 ENVIRONMENT ASAN_OPTIONS=detect_leaks=0)
set(name "solution:ch13_ring_mpi says its times are not meaningful when ranks outnumber the machine's cores")
add_test(NAME ${name} COMMAND bash -c "\"$0\" 0 'ranks share [0-9]+ cores' \"$1\" $(( $(getconf _NPROCESSORS_ONLN) + 1 )) \
                                       \"$2\" --n 64 --heads 0 --repeats 1"
                              ${PROJECT_SOURCE_DIR}/cmake/run_cli_test.sh ${PROJECT_SOURCE_DIR}/chapters/13_ring/mpirun.sh
                              $<TARGET_FILE:ch13_ring_mpi_solution>)
set_tests_properties(${name} PROPERTIES LABELS "solution;ch13;mpi" TIMEOUT 120 ENVIRONMENT ASAN_OPTIONS=detect_leaks=0)
set(name "solution:ch13_ring_mpi on one rank times without the note about shared cores")
add_test(NAME ${name} COMMAND ${PROJECT_SOURCE_DIR}/chapters/13_ring/mpirun.sh 1 $<TARGET_FILE:ch13_ring_mpi_solution>
                              --n 64 --heads 0 --repeats 1)
set_tests_properties(${name} PROPERTIES LABELS "solution;ch13;mpi" TIMEOUT 120 ENVIRONMENT ASAN_OPTIONS=detect_leaks=0
                                        FAIL_REGULAR_EXPRESSION "ranks share")
# Bad launches and options stop with status 2 before any work: mpirun.sh's NP (0 meant every slot to mpirun, -1
# exited 1) and PROGRAM (a missing one exited 132), --pingpong on one rank, --fail-on-rank '' (read as rank 0) or
# past the ranks.
foreach(case "NP '0'|0|${PROJECT_SOURCE_DIR}/chapters/13_ring/mpirun.sh;0;$<TARGET_FILE:ch13_ring_mpi_solution>;--check"
             "NP '-1'|-1|${PROJECT_SOURCE_DIR}/chapters/13_ring/mpirun.sh;-1;$<TARGET_FILE:ch13_ring_mpi_solution>;--check"
             "PROGRAM '/no/such/program'|missing|${PROJECT_SOURCE_DIR}/chapters/13_ring/mpirun.sh;2;/no/such/program"
             "--pingpong: .*at least 2|pingpong|${PROJECT_SOURCE_DIR}/chapters/13_ring/mpirun.sh;1;$<TARGET_FILE:ch13_ring_mpi_solution>;--pingpong"
             "--fail-on-rank: an empty value|fail-empty|bash;-c;exec ${PROJECT_SOURCE_DIR}/chapters/13_ring/mpirun.sh 2 $<TARGET_FILE:ch13_ring_mpi_solution> --check --fail-on-rank ''"
             "--fail-on-rank 5: there is no such rank|fail-past|${PROJECT_SOURCE_DIR}/chapters/13_ring/mpirun.sh;2;$<TARGET_FILE:ch13_ring_mpi_solution>;--check;--fail-on-rank;5")
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 regex)
  list(GET parts 1 label)
  list(SUBLIST parts 2 -1 command)
  set(name "solution:ch13_ring_mpi refuses a bad launch with status 2 before any work (${label})")
  add_test(NAME ${name} COMMAND ${PROJECT_SOURCE_DIR}/cmake/run_cli_test.sh 2 "${regex}" ${command})
  set_tests_properties(${name} PROPERTIES LABELS "solution;ch13;mpi" TIMEOUT 120 ENVIRONMENT ASAN_OPTIONS=detect_leaks=0)
endforeach()
