# The Qwen3 LLM's ctests (tests/check_qwen3_llm.py), run through gsurg_run (the family has no alias): the tiny
# checkpoint (random weights, no tokenizer) and the trained fixture (graphsurgeon/models/qwen3_llm/trained,
# which answers evaluation.text_tasks' questions) converted once at fp32 (fixture qwen3_llm_model); greedy
# tokens equal the PyTorch reference's and the ncnn wheel's (the trained model's prompt ids, tokens and text
# through --prompt); bad inputs exit 2 naming the culprit; and the core's batch mode (--batch) on the trained
# model: results equal single runs, bad lines answered with their error, unreadable files refused; and the
# stated limits (limits): --gen past the context said on stderr / stop "context", --prompt-file as --prompt.
if(NOT GSURG_PYTHON)
  message(WARNING "qwen3_llm: no Python found (set GSURG_PYTHON): its parity tests are not registered")
else()
  set(_check ${CMAKE_CURRENT_SOURCE_DIR}/tests/check_qwen3_llm.py)
  set(_model ${GSURG_TEST_MODELS_DIR}/qwen3_llm_model)
  set(_trained ${GSURG_TEST_MODELS_DIR}/qwen3_llm_trained_model)
  gsurg_runner_check_args(_run_args gsurg_run ${_model})
  add_test(NAME qwen3_llm_convert_model
    COMMAND ${GSURG_PYTHON} ${_check} convert --out ${_model} --trained-out ${_trained})
  set_tests_properties(qwen3_llm_convert_model PROPERTIES FIXTURES_SETUP qwen3_llm_model TIMEOUT 600
    ENVIRONMENT "${GSURG_CHECK_ENVIRONMENT}")
  foreach(mode greedy bad-input batch limits)
    string(REPLACE "-" "_" _name "qwen3_llm_${mode}")
    add_test(NAME ${_name} COMMAND ${GSURG_PYTHON} ${_check} ${mode} ${_run_args} --trained-model ${_trained})
    set_tests_properties(${_name} PROPERTIES FIXTURES_REQUIRED qwen3_llm_model TIMEOUT 900
      ENVIRONMENT "${GSURG_CHECK_ENVIRONMENT}")
  endforeach()
endif()
