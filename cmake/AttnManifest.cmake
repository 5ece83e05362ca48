# The chapters, as chapters/manifest.json lists them: the top-level CMakeLists.txt adds each chapter's folder
# in the manifest's order, and a chapter's CMakeLists.txt reads its own entry (its MPI launcher, its model).
# The driver reads the same file (driver/manifest.py), so the build and ./course never list chapters.

# attn_read_manifest(FILE): ATTN_CHAPTER_STEMS (01_intuition;02_qkv_trace;...) in the caller's scope; the
# file's text is kept for attn_manifest_get(). A change to the file re-runs CMake.
function(attn_read_manifest file)
  file(READ ${file} json)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${file})
  set_property(GLOBAL PROPERTY ATTN_MANIFEST_JSON "${json}")
  string(JSON count LENGTH "${json}" chapters)
  set(stems "")
  if(count GREATER 0)
    math(EXPR last "${count} - 1")
    foreach(i RANGE ${last})
      string(JSON number GET "${json}" chapters ${i} number)
      string(JSON name GET "${json}" chapters ${i} name)
      if(NOT EXISTS ${PROJECT_SOURCE_DIR}/chapters/${number}_${name}/CMakeLists.txt)
        message(FATAL_ERROR "chapters/manifest.json lists ${number}_${name}, but chapters/${number}_${name}/"
                            "CMakeLists.txt is missing")
      endif()
      list(APPEND stems ${number}_${name})
    endforeach()
  endif()
  set(ATTN_CHAPTER_STEMS ${stems} PARENT_SCOPE)
endfunction()

# attn_manifest_get(NN KEY... OUT): the value at KEY... (e.g. mpi launcher) of chapter NN's entry in OUT, or
# OUT-NOTFOUND when the entry has no such field.
function(attn_manifest_get NN)
  set(keys ${ARGN})
  list(POP_BACK keys out)
  get_property(json GLOBAL PROPERTY ATTN_MANIFEST_JSON)
  string(JSON count LENGTH "${json}" chapters)
  math(EXPR last "${count} - 1")
  foreach(i RANGE ${last})
    string(JSON number GET "${json}" chapters ${i} number)
    if("${number}" STREQUAL "${NN}")
      string(JSON value ERROR_VARIABLE error GET "${json}" chapters ${i} ${keys})
      if(error)
        set(${out} ${out}-NOTFOUND PARENT_SCOPE)
      else()
        set(${out} "${value}" PARENT_SCOPE)
      endif()
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "attn_manifest_get: chapters/manifest.json has no chapter ${NN}")
endfunction()
