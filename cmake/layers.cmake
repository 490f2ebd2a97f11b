# The layers of src/ and what each may include (docs/layers.md). A layer's code sees only
# the headers of the layers below it: each library compiles against an include folder of
# its own (build/layers/<library>-<hash>) holding links to exactly those folders of src/,
# so an include of a layer above fails to compile ("No such file or directory") instead of
# waiting for a review. tests/layering proves that it does and checks the include graph.
set(QHX_LAYER_ROOT ${CMAKE_BINARY_DIR}/layers)

# qhx_layer(TARGET SEES entry...): TARGET compiles against src/<entry> for each entry (a
# folder, or one header such as backends/delegate.hpp) and the public include/, nothing
# else of src/. The folder's name carries a hash of the entries, so a layer that is
# allowed less after a change does not keep a stale link from an earlier configure.
function(qhx_layer target)
  cmake_parse_arguments(L "" "" "SEES" ${ARGN})
  string(MD5 _hash "${L_SEES}")
  string(SUBSTRING ${_hash} 0 8 _hash)
  set(root ${QHX_LAYER_ROOT}/${target}-${_hash})
  foreach(entry IN LISTS L_SEES)
    if(NOT EXISTS ${PROJECT_SOURCE_DIR}/src/${entry})
      message(FATAL_ERROR "qhx_layer(${target}): src/${entry} does not exist")
    endif()
    get_filename_component(parent ${root}/${entry} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${entry} ${root}/${entry} SYMBOLIC)
  endforeach()
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR}/include PRIVATE ${root})
  target_compile_options(${target} PRIVATE ${QHX_WARNINGS})
  set_property(TARGET ${target} PROPERTY QHX_LAYER_SEES "${L_SEES}")
  set_property(GLOBAL APPEND PROPERTY QHX_LAYER_TARGETS ${target})
endfunction()

# build/layers/layers.json: each layered library's sources (relative to src/) and what it
# sees, for tests/layering/check_layers.py. Called once every library is defined.
function(qhx_write_layer_table)
  get_property(targets GLOBAL PROPERTY QHX_LAYER_TARGETS)
  set(json "{}")
  foreach(t IN LISTS targets)
    get_target_property(sources ${t} SOURCES)
    get_target_property(src_dir ${t} SOURCE_DIR)
    get_target_property(sees ${t} QHX_LAYER_SEES)
    set(entry "{\"sources\": [], \"sees\": []}")
    set(i 0)
    foreach(f IN LISTS sources)
      if(NOT IS_ABSOLUTE ${f})
        set(f ${src_dir}/${f})
      endif()
      file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${f})
      string(JSON entry SET "${entry}" sources ${i} "\"${rel}\"")
      math(EXPR i "${i} + 1")
    endforeach()
    set(i 0)
    foreach(e IN LISTS sees)
      string(JSON entry SET "${entry}" sees ${i} "\"${e}\"")
      math(EXPR i "${i} + 1")
    endforeach()
    string(JSON json SET "${json}" ${t} "${entry}")
  endforeach()
  file(WRITE ${QHX_LAYER_ROOT}/layers.json "${json}\n")
endfunction()

# What each layer sees, lowest first; every layer sees what the ones it lists see.
set(QHX_SEES_COMMON   common)
set(QHX_SEES_FORMATS  ${QHX_SEES_COMMON} formats)
set(QHX_SEES_MODELS   ${QHX_SEES_COMMON} formats tokenizer image chat models)
set(QHX_SEES_QWEN3VL  ${QHX_SEES_MODELS} qwen3vl)
set(QHX_SEES_BACKENDS ${QHX_SEES_FORMATS} backends/delegate.hpp)
set(QHX_SEES_CPU      ${QHX_SEES_QWEN3VL} backends/delegate.hpp backends/cpu)
set(QHX_SEES_QNN      ${QHX_SEES_BACKENDS} backends/qnn)
set(QHX_SEES_RUNTIME  ${QHX_SEES_QWEN3VL} sampling backends/delegate.hpp runtime)
set(QHX_SEES_TOOLING  ${QHX_SEES_RUNTIME} backends/cpu backends/qnn)

