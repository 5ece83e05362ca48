# Chapter 12's parts beyond attn_add_chapter(): Boost.Graph for attention flow, and the test of the chapter's
# own code (the pronoun task, attention flow), on the solution track only like chapter 13's core test.

# Attention flow is a max-flow, computed with Boost.Graph (header-only for max-flow; Debian's
# libboost-graph-dev). Without it flow is skipped with a message and the rest of the chapter builds.
find_path(ATTN_BOOST_GRAPH_INCLUDE_DIR boost/graph/edmonds_karp_max_flow.hpp)
if(ATTN_BOOST_GRAPH_INCLUDE_DIR)
  target_include_directories(ch12_learning_core SYSTEM PRIVATE ${ATTN_BOOST_GRAPH_INCLUDE_DIR})
  target_compile_definitions(ch12_learning_core PRIVATE ATTN_HAVE_BOOST_GRAPH=1)
else()
  target_compile_definitions(ch12_learning_core PRIVATE ATTN_HAVE_BOOST_GRAPH=0)
  message(WARNING "attn: Boost.Graph not found (apt-get install libboost-graph-dev): chapter 12's attention flow "
                  "is SKIPPED")
endif()

add_executable(ch12_learning_core_test ${PROJECT_SOURCE_DIR}/tests/12_learning_core_test.cpp)
target_link_libraries(ch12_learning_core_test PRIVATE ch12_learning_solution attn_test_support attn_test_main)
attn_strict_warnings(ch12_learning_core_test)
attn_discover_tests(ch12_learning_core_test "solution:" "solution;ch12")
add_dependencies(attn_solution_tests ch12_learning_core_test)
attn_cli_test(ch12_learning "writes its trained model as a checkpoint of .npy files" STATUS 0
              MATCHES "checkpoint: the trained model written" ARGS --steps 20 --pronoun-steps 5 --save-checkpoint ${CMAKE_BINARY_DIR}/ch12_checkpoint)
attn_cli_test(ch12_learning "refuses to write a checkpoint into / with status 2, before training" STATUS 2
              MATCHES "--save-checkpoint" ARGS --save-checkpoint /)
