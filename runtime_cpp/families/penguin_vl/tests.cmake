# Penguin-VL's ctests. The runner's checks against the PyTorch reference run on this family's tiny model
# (tests/check_generate.py): it is converted once (fixture runner_model), then greedy tokens are compared
# with the reference, sampling is checked for determinism, and bad inputs must give exit code 2 and a
# message naming the culprit (and, in the GSURG_SANITIZE build, so must every mutated input of runner_fuzz).
# They run the program gsurg_run; penguin_vl_alias proves the alias penguin_vl_run.

# The Penguin-VL image processor and the shared decoding, resizing and compositing against Pillow and the
# Python processor (runtime_cpp/tests/check_preprocess.py, through penguin_vl_preprocess_dump).
gsurg_preprocess_dump(penguin_vl_preprocess_dump tests/penguin_vl_preprocess_dump.cpp gsurg_penguin_vl_preprocess)

# The alias runs the same program under the family's name: its usage names it and the family's rule file.
add_test(NAME penguin_vl_alias COMMAND penguin_vl_run --help)
set_tests_properties(penguin_vl_alias PROPERTIES TIMEOUT 60
  PASS_REGULAR_EXPRESSION "usage: penguin_vl_run --model DIR.*gsurg apply rules/penguin_vl.yaml")

if(NOT GSURG_PYTHON)
  message(WARNING "penguin_vl: no Python found (set GSURG_PYTHON): its parity tests are not registered")
else()
  set(_wrapper_args "")
  if(GSURG_TEST_WRAPPER)
    set(_wrapper_args --wrapper "${GSURG_TEST_WRAPPER}")
  endif()
  if(TARGET penguin_vl_preprocess_dump)
    add_test(NAME penguin_vl_preprocess_parity
      COMMAND "${GSURG_PYTHON}" "${PROJECT_SOURCE_DIR}/tests/check_preprocess.py"
              --dump $<TARGET_FILE:penguin_vl_preprocess_dump> ${_wrapper_args})
  endif()

  set(_check ${CMAKE_CURRENT_SOURCE_DIR}/tests/check_generate.py)
  set(_model ${GSURG_TEST_MODELS_DIR}/penguin_vl_model)
  gsurg_runner_check_args(_run_args gsurg_run ${_model})

  add_test(NAME runner_convert_model
    COMMAND ${GSURG_PYTHON} ${_check} convert --out ${_model} --untied-out ${_model}_untied)
  set_tests_properties(runner_convert_model PROPERTIES FIXTURES_SETUP runner_model TIMEOUT 600
    ENVIRONMENT "${GSURG_CHECK_ENVIRONMENT}")

  foreach(mode greedy sampling bad-input)
    string(REPLACE "-" "_" _name "runner_${mode}")
    set(_extra "")
    if(mode STREQUAL "greedy")
      set(_extra --untied-model ${_model}_untied)
    endif()
    add_test(NAME ${_name} COMMAND ${GSURG_PYTHON} ${_check} ${mode} ${_run_args} ${_extra})
    set_tests_properties(${_name} PROPERTIES FIXTURES_REQUIRED runner_model TIMEOUT 900
      ENVIRONMENT "${GSURG_CHECK_ENVIRONMENT}")
  endforeach()

  # The core's batch mode with images (runtime_cpp/tests/check_batch_images.py): relative, absolute and no
  # image names, results equal to single runs, a missing image that line's error.
  add_test(NAME runner_batch_images
    COMMAND ${GSURG_PYTHON} ${PROJECT_SOURCE_DIR}/tests/check_batch_images.py ${_run_args})
  set_tests_properties(runner_batch_images PROPERTIES FIXTURES_REQUIRED runner_model TIMEOUT 900
    ENVIRONMENT "${GSURG_CHECK_ENVIRONMENT}")

  # The bounded mutation test of the input readers (model.json, images, tokenizer.json): in the sanitizer
  # build, where a memory error or UB is a report rather than luck.
  if(GSURG_SANITIZE)
    add_test(NAME runner_fuzz COMMAND ${GSURG_PYTHON} ${_check} fuzz ${_run_args})
    set_tests_properties(runner_fuzz PROPERTIES FIXTURES_REQUIRED runner_model TIMEOUT 600
      ENVIRONMENT "${GSURG_CHECK_ENVIRONMENT}")
  endif()

  # The core/family seams in C++ (tests/family_seams.cpp): the registry, the family model.json makes, and
  # that the decoder takes the RoPE tables and extra inputs a step is given, on the same tiny model.
  add_executable(gsurg_family_seams tests/family_seams.cpp)
  target_link_libraries(gsurg_family_seams PRIVATE gsurg_runner)
  add_test(NAME runner_family_seams COMMAND gsurg_family_seams ${_model})
  set_tests_properties(runner_family_seams PROPERTIES FIXTURES_REQUIRED runner_model TIMEOUT 300)

  gsurg_precision_tests(penguin_vl runner gsurg_run ${_model})
endif()
