# Warning and sanitizer flags, applied per target so system headers (xtensor, fmt) stay quiet.

# attn_strict_warnings(target): the course's own code: loud, and errors when ATTN_WERROR is ON.
# GCC 12's -Wmaybe-uninitialized fires inside xtl/xtensor templates inlined at -O3 (false positives in
# system headers that -isystem cannot silence): it stays off; ASan/UBSan and the tests catch the real thing.
set(ATTN_WARNINGS -Wall -Wextra -Wpedantic -Wconversion -Wshadow)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  list(APPEND ATTN_WARNINGS -Wno-maybe-uninitialized)  # a GCC warning: Clang has no such option
else()
  # Clang's -Wconversion includes sign conversions, which GCC's leaves out for C++ (it has -Wsign-conversion for
  # them): the same set of warnings on both compilers.
  list(APPEND ATTN_WARNINGS -Wno-sign-conversion)
endif()
# GCC 14's -Warray-bounds fires inside xtensor 0.25's shape copies (std::array<size_t, 1> through memcpy, inlined
# into the course's functions, where -isystem cannot silence it), on code that reads nothing out of bounds: the same
# kind of false positive, handled the same way. GCC 12 and Clang keep it.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 14)
  list(APPEND ATTN_WARNINGS -Wno-array-bounds)
endif()

function(attn_strict_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${ATTN_WARNINGS}>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${ATTN_WERROR}>>:-Werror>)
endfunction()

# attn_learner_warnings(target): the reader's exercises: the same warnings, never errors, and an unused
# parameter is no warning (every skeleton has them until it is written).
function(attn_learner_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${ATTN_WARNINGS} -Wno-unused-parameter>)
endfunction()

if(ATTN_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# ThreadSanitizer (the tsan preset): the threaded kernels' tests run under it in CI. Not together with
# ASan. row_ops.cpp then compiles its loops once, without the load-time resolvers TSan cannot run.
if(ATTN_TSAN)
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
endif()
