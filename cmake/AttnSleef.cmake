# SLEEF's vectorised exponential and erf (Debian's libsleef-dev), for kernels compiled for AVX-512 and AVX2 on
# x86-64 (chapter 16; chapter 14's scan runs on the vector layer, attn/vector.hpp, since). Those files are compiled with -mavx512f / -mavx2 -mfma (SLEEF declares its
# functions only then) and without the precompiled header (its flags differ).

# attn_find_sleef(WHAT): sets ATTN_HAVE_SLEEF (ON/OFF), ATTN_SLEEF_LIBRARY and ATTN_SLEEF_INCLUDE_DIR in the
# caller's scope; without SLEEF it warns that WHAT runs its portable code.
macro(attn_find_sleef what)
  find_library(ATTN_SLEEF_LIBRARY sleef)
  find_path(ATTN_SLEEF_INCLUDE_DIR sleef.h)
  if(ATTN_SLEEF_LIBRARY AND ATTN_SLEEF_INCLUDE_DIR AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64"
     AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    set(ATTN_HAVE_SLEEF ON)
  else()
    set(ATTN_HAVE_SLEEF OFF)
    message(WARNING "attn: SLEEF not found (apt-get install libsleef-dev) or not x86-64: ${what} runs its "
                    "portable code")
  endif()
endmacro()

# attn_sleef_sources(VAR ISA FILE...): when SLEEF was found, appends FILE... to VAR and compiles them for ISA
# (avx512: -mavx512f; avx2: -mavx2 -mfma) without the precompiled header.
macro(attn_sleef_sources var isa)
  if(ATTN_HAVE_SLEEF)
    if("${isa}" STREQUAL "avx512")
      set(attn_sleef_flags "-mavx512f")
    else()
      set(attn_sleef_flags "-mavx2;-mfma")
    endif()
    foreach(attn_sleef_file ${ARGN})
      list(APPEND ${var} ${attn_sleef_file})
      set_source_files_properties(${attn_sleef_file} PROPERTIES COMPILE_OPTIONS "${attn_sleef_flags}"
                                  SKIP_PRECOMPILE_HEADERS ON)
    endforeach()
  endif()
endmacro()
