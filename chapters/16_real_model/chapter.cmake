# Chapter 16's parts beyond attn_add_chapter(): where the model and the recorded reference are. Its model tests
# skip themselves where ./course setup has not unpacked the model (attn::test::skip: reported as skipped).
target_compile_definitions(ch16_real_model_core
                           PRIVATE ATTN_MODEL_DIR="${PROJECT_SOURCE_DIR}/build/models/all-MiniLM-L6-v2")
target_compile_definitions(ch16_real_model_test_cases
                           PRIVATE ATTN_CH16_REFERENCE="${PROJECT_SOURCE_DIR}/tests/data/16_real_model_reference.txt")
attn_cli_test(ch16_real_model "says how to get the model when it is missing" STATUS 0 MATCHES "./course setup"
              ARGS --model-dir ${CMAKE_BINARY_DIR}/no-such-model)
target_compile_definitions(ch16_real_model_main
                           PRIVATE ATTN_CH16_REFERENCE="${PROJECT_SOURCE_DIR}/tests/data/16_real_model_reference.txt"
                                   ATTN_CH16_SENTENCES="${PROJECT_SOURCE_DIR}/chapters/16_real_model/sentences.txt")
# ./course crosscheck: the chapter's ids and embeddings, computed live beside transformers.
target_link_libraries(attn_crosscheck_cases PRIVATE ch16_real_model_solution)
target_compile_definitions(attn_crosscheck_cases PRIVATE ATTN_HAVE_CH16=1
                           ATTN_CH16_REFERENCE="${PROJECT_SOURCE_DIR}/tests/data/16_real_model_reference.txt")
# The chapter's own code on bad input (tests/16_real_model_core_test.cpp), on the solution track; needs no model.
attn_add_core_test(16 real_model)
