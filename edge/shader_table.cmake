# The generator of the compute shaders' tables: a list of variants, one edge_shader() call each
# (edge/shaders/variants.cmake for the runtime, bench/edge_shaders/variants.cmake for the bench's
# probes), becomes the SPIR-V of every variant, an enum with one enumerator per variant and a table
# with one row per enumerator (edge/shader_variant.h). Nothing else names a variant's source,
# defines, layout or block, so enum, table and SPIR-V cannot disagree.
#
#   edge_shader_table(<library> LIST <list.cmake> ENUM <Enum> HEADER <path/name.h>)
#
# makes the static library <library> of the table, whose users include HEADER (generated under
# the current binary directory's generated/, which the library exports): `enum class <Enum>` in
# list order, `k<Enum>Count`, and `const ShaderVariant& VariantOf(<Enum>)` in fsdpd::edge.
#
#   edge_shader(<kName> <source> "<name>" LAYOUT <buffers> <push bytes> [DEFINES -D…]
#               [MATRICES subgroup|workgroup] [MATMUL <block name>] [ATTENTION <name>])
#
# is one variant (the list's header says what each field means). A source path is relative to
# the list's folder. A variant with MATRICES workgroup is compiled by slang's glslang through
# edge_glsl_to_spirv (edge/CMakeLists.txt) and left out, its row without code, where that tool
# is not built; every other one by glslc.
include_guard(GLOBAL)

# A CMake string as a C++ string literal.
function(edge_shader_cxx_string out text)
  string(REPLACE "\\" "\\\\" text "${text}")
  string(REPLACE "\"" "\\\"" text "${text}")
  set(${out} "\"${text}\"" PARENT_SCOPE)
endfunction()

# The value of -D<name>=<value> among `defines`, or `fallback`.
function(edge_shader_define out defines name fallback)
  set(value ${fallback})
  foreach(define ${defines})
    if(define MATCHES "^-D${name}=(.+)$")
      set(value ${CMAKE_MATCH_1})
    endif()
  endforeach()
  set(${out} ${value} PARENT_SCOPE)
endfunction()

# One variant: its compile rule, its enumerator and its row, appended to the table being made
# (edge_shader_table's variables, set in its scope).
function(edge_shader id source name)
  cmake_parse_arguments(ARG "" "MATRICES;MATMUL;ATTENTION" "LAYOUT;DEFINES" ${ARGN})
  set(where "${edge_table_list}: edge_shader(${id} …)")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "${where}: unexpected arguments '${ARG_UNPARSED_ARGUMENTS}'")
  endif()
  if(NOT id MATCHES "^k[A-Z][A-Za-z0-9]*$")
    message(FATAL_ERROR "${where}: the enumerator must be kCamelCase")
  endif()
  if(id IN_LIST edge_table_ids)
    message(FATAL_ERROR "${where}: ${id} is listed twice")
  endif()
  list(LENGTH ARG_LAYOUT layout_length)
  if(NOT layout_length EQUAL 2)
    message(FATAL_ERROR "${where}: LAYOUT takes the buffers and the push-constant bytes")
  endif()
  list(GET ARG_LAYOUT 0 bindings)
  list(GET ARG_LAYOUT 1 push_bytes)
  if(NOT ARG_MATRICES)
    set(ARG_MATRICES none)
  endif()
  if(NOT ARG_MATRICES MATCHES "^(none|subgroup|workgroup)$")
    message(FATAL_ERROR "${where}: MATRICES is subgroup or workgroup, not ${ARG_MATRICES}")
  endif()
  if(NOT IS_ABSOLUTE "${source}")
    set(source "${CMAKE_CURRENT_LIST_DIR}/${source}")
  endif()
  if(NOT EXISTS "${source}")
    message(FATAL_ERROR "${where}: no shader ${source}")
  endif()
  get_filename_component(source_name "${source}" NAME)
  get_filename_component(source_dir "${source}" DIRECTORY)

  # The output block (BM × BN, or BR × HD for attention) and K slice, read from the defines.
  edge_shader_define(rows "${ARG_DEFINES}" BM 0)
  edge_shader_define(cols "${ARG_DEFINES}" BN 0)
  if(rows EQUAL 0)
    edge_shader_define(rows "${ARG_DEFINES}" BR 1)
    edge_shader_define(cols "${ARG_DEFINES}" HD 1)
  endif()
  edge_shader_define(slice "${ARG_DEFINES}" BK 0)
  set(half_input false)
  if("-DX_F16" IN_LIST ARG_DEFINES)
    set(half_input true)
  endif()

  set(output ${edge_table_spirv_dir}/${id}.spv.inc)
  set(built ON)
  # The headers the shaders include (common.glsl, …): a change rebuilds them all.
  file(GLOB includes CONFIGURE_DEPENDS ${source_dir}/*.glsl)
  if(ARG_MATRICES STREQUAL "workgroup")
    if(TARGET edge_glsl_to_spirv)
      get_target_property(glslang edge_glsl_to_spirv EDGE_GLSLANG_LIBRARY)
      add_custom_command(
        OUTPUT ${output}
        # The leak checker of a sanitizer build would fail the tool on glslang's own allocations.
        COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=0
                $<TARGET_FILE:edge_glsl_to_spirv> ${glslang} ${source} ${output} ${ARG_DEFINES}
        DEPENDS ${source} ${includes} edge_glsl_to_spirv
        COMMENT "glslang (slang) ${source_name} ${ARG_DEFINES}"
        VERBATIM)
    else()
      set(built OFF)
    endif()
  else()
    add_custom_command(
      OUTPUT ${output}
      COMMAND ${Vulkan_GLSLC_EXECUTABLE} --target-env=vulkan1.1 -O -mfmt=c ${ARG_DEFINES}
              ${source} -o ${output}
      DEPENDS ${source} ${includes}
      COMMENT "glslc ${source_name} ${ARG_DEFINES}"
      VERBATIM)
  endif()

  edge_shader_cxx_string(name_literal "${name}")
  string(REPLACE ";" " " define_text "${ARG_DEFINES}")
  edge_shader_cxx_string(defines_literal "${define_text}")
  set(matmul_literal nullptr)
  if(ARG_MATMUL)
    edge_shader_cxx_string(matmul_literal "${ARG_MATMUL}")
  endif()
  set(attention_literal nullptr)
  if(ARG_ATTENTION)
    edge_shader_cxx_string(attention_literal "${ARG_ATTENTION}")
  endif()
  string(SUBSTRING "${ARG_MATRICES}" 0 1 first)
  string(TOUPPER "${first}" first)
  string(SUBSTRING "${ARG_MATRICES}" 1 -1 rest)
  set(matrices "Matrices::k${first}${rest}")
  if(built)
    string(APPEND edge_table_words
           "constexpr uint32_t ${id}Words[] =\n#include \"${edge_table_include_dir}/${id}.spv.inc\"\n    ;\n")
    set(code "Code(${id}Words)")
    list(APPEND edge_table_outputs ${output})
  else()
    set(code "SpirV{nullptr, 0}")
  endif()
  string(APPEND edge_table_rows
         "    {\"${id}\", ${name_literal}, \"${source_name}\", ${defines_literal}, ${code}, "
         "${bindings}, ${push_bytes}, {${rows}, ${cols}}, ${slice}, ${matrices}, ${half_input}, "
         "${matmul_literal}, ${attention_literal}},\n")
  string(APPEND edge_table_enumerators "  ${id},  // ${name}\n")
  list(APPEND edge_table_ids ${id})
  foreach(variable edge_table_words edge_table_rows edge_table_enumerators edge_table_ids
          edge_table_outputs)
    set(${variable} "${${variable}}" PARENT_SCOPE)
  endforeach()
endfunction()

# Writes `text` to `path` only where it differs, so that a configure leaves the table's objects
# alone unless the list changed.
function(edge_shader_write path text)
  file(WRITE "${path}.new" "${text}")
  configure_file("${path}.new" "${path}" COPYONLY)
  file(REMOVE "${path}.new")
endfunction()

function(edge_shader_table library)
  cmake_parse_arguments(ARG "" "LIST;ENUM;HEADER" "" ${ARGN})
  if(NOT ARG_LIST OR NOT ARG_ENUM OR NOT ARG_HEADER)
    message(FATAL_ERROR "edge_shader_table(${library}): LIST, ENUM and HEADER are required")
  endif()
  set(generated ${CMAKE_CURRENT_BINARY_DIR}/generated)
  get_filename_component(header_dir "${ARG_HEADER}" DIRECTORY)
  get_filename_component(header_name "${ARG_HEADER}" NAME_WE)
  set(edge_table_include_dir ${header_dir}/${header_name}_spirv)
  set(edge_table_spirv_dir ${generated}/${edge_table_include_dir})
  file(MAKE_DIRECTORY ${edge_table_spirv_dir})
  file(RELATIVE_PATH edge_table_list ${CMAKE_SOURCE_DIR} ${ARG_LIST})
  set(edge_table_words "")
  set(edge_table_rows "")
  set(edge_table_enumerators "")
  set(edge_table_ids "")
  set(edge_table_outputs "")
  include(${ARG_LIST})
  list(LENGTH edge_table_ids count)
  if(count EQUAL 0)
    message(FATAL_ERROR "${edge_table_list}: no edge_shader() variant listed")
  endif()

  set(banner "// Generated by edge/shader_table.cmake from ${edge_table_list}: edit the list, not this file.")
  edge_shader_write(${generated}/${ARG_HEADER} "${banner}
#pragma once

#include \"edge/shader_variant.h\"

namespace fsdpd::edge {

enum class ${ARG_ENUM} {
${edge_table_enumerators}};
inline constexpr int k${ARG_ENUM}Count = ${count};

// The variant's row of the table.
const ShaderVariant& VariantOf(${ARG_ENUM} shader);

}  // namespace fsdpd::edge
")
  set(source ${generated}/${header_dir}/${header_name}.cc)
  edge_shader_write(${source} "${banner}
#include \"${ARG_HEADER}\"

#include <cstddef>
#include <cstdint>

namespace fsdpd::edge {
namespace {

// Each .inc is the compiler's braced list of 32-bit words.
${edge_table_words}
template <size_t N>
constexpr SpirV Code(const uint32_t (&words)[N]) {
  return {words, N * sizeof(uint32_t)};
}

constexpr ShaderVariant kRows[] = {
${edge_table_rows}};
static_assert(sizeof(kRows) / sizeof(kRows[0]) == k${ARG_ENUM}Count);

}  // namespace

const ShaderVariant& VariantOf(${ARG_ENUM} shader) { return kRows[static_cast<int>(shader)]; }

}  // namespace fsdpd::edge
")
  add_library(${library} STATIC ${source} ${edge_table_outputs})
  target_include_directories(${library} PUBLIC ${CMAKE_SOURCE_DIR} ${generated})
endfunction()
