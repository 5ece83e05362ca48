# Chapter 15's parts beyond attn_add_chapter(): the MPI program that reduces a decode step over P ranks with
# the merge as an MPI operation, and its ctest cases at np = 1 … 8. Open MPI is optional, as in chapter 13:
# without it this part is skipped with a message and the rest of the chapter builds.
find_package(MPI COMPONENTS CXX QUIET)
find_program(ATTN_MPIRUN mpirun)
if(NOT MPI_CXX_FOUND OR NOT ATTN_MPIRUN)
  message(WARNING "attn: Open MPI not found (libopenmpi-dev, openmpi-bin): chapter 15's MPI program is SKIPPED")
  return()
endif()

add_library(ch15_structured_mpi_main OBJECT ${PROJECT_SOURCE_DIR}/chapters/15_structured/structured_mpi.cpp)
target_link_libraries(ch15_structured_mpi_main PUBLIC ch15_structured_core MPI::MPI_CXX)
attn_strict_warnings(ch15_structured_mpi_main)
foreach(track solution exercise)
  add_executable(ch15_structured_mpi_${track} $<TARGET_OBJECTS:ch15_structured_mpi_main>)
  target_link_libraries(ch15_structured_mpi_${track} PRIVATE ch15_structured_mpi_main ch15_structured_${track})
endforeach()
set_target_properties(ch15_structured_mpi_solution PROPERTIES OUTPUT_NAME ch15_structured_mpi)
set_target_properties(ch15_structured_mpi_exercise PROPERTIES OUTPUT_NAME ch15_structured_mpi_exercise)
add_dependencies(attn_solution_tests ch15_structured_mpi_solution)

# Allreduce with the merge as an MPI operation, and the binomial tree by hand, each equal to single-process
# attention; n = 1 and 3 leave ranks without keys. A hang is killed by mpirun's --timeout and ctest's TIMEOUT.
foreach(np 1 2 3 4 5 6 7 8)
  set(name "solution:ch15_structured_mpi on ${np} ranks: Allreduce with the merge op and the tree equal one process")
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} -E env ATTN_MPI_TIMEOUT=100 ASAN_OPTIONS=detect_leaks=0
                                ${PROJECT_SOURCE_DIR}/chapters/13_ring/mpirun.sh ${np}
                                $<TARGET_FILE:ch15_structured_mpi_solution> --check)
  set_tests_properties(${name} PROPERTIES LABELS "solution;ch15;mpi" TIMEOUT 120 FAIL_REGULAR_EXPRESSION "FAIL")
endforeach()
set(name "solution:ch15_structured_mpi a rank's bad option stops the whole job with status 2")
add_test(NAME ${name} COMMAND ${PROJECT_SOURCE_DIR}/cmake/run_cli_test.sh 2 "--n"
                              ${PROJECT_SOURCE_DIR}/chapters/13_ring/mpirun.sh 2
                              $<TARGET_FILE:ch15_structured_mpi_solution> --n 0)
set_tests_properties(${name} PROPERTIES LABELS "solution;ch15;mpi" TIMEOUT 120 ENVIRONMENT ASAN_OPTIONS=detect_leaks=0)
