# Chapter 11's parts beyond attn_add_chapter(): the test of the chapter's own code (the modifier kernel, its
# block masks and the modifiers on bad input), on the solution track only like chapters 12's and 13's core tests.
# The kernel runs threads, so the test also carries the "threads" label (the tsan preset runs it).
add_executable(ch11_positions_core_test ${PROJECT_SOURCE_DIR}/tests/11_positions_core_test.cpp)
target_link_libraries(ch11_positions_core_test PRIVATE ch11_positions_solution attn_test_support attn_test_main)
attn_strict_warnings(ch11_positions_core_test)
attn_use_pch(ch11_positions_core_test)
attn_discover_tests(ch11_positions_core_test "solution:" "solution;ch11;threads")
add_dependencies(attn_solution_tests ch11_positions_core_test)
add_dependencies(attn_threaded_tests ch11_positions_core_test)
