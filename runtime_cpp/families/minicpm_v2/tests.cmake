# MiniCPM-V-2's ctests. minicpm_v2_preprocess_parity: the image processor and the position tables of
# gsurg_minicpm_v2_preprocess, through minicpm_v2_preprocess_dump, against goldens computed at test time
# (runtime_cpp/tests/check_preprocess_minicpmv2.py): the Python processor graphsurgeon/models/minicpm_v2
# (itself checked against the official code under Pillow 10.1.0) and Pillow for the plans and every uint8 and
# float32 image, torch's F.interpolate for the resampled position table, numpy for the sin-cos table.
gsurg_preprocess_dump(minicpm_v2_preprocess_dump tests/minicpm_v2_preprocess_dump.cpp gsurg_minicpm_v2_preprocess
  gsurg_minicpm_v2_positions)

if(NOT GSURG_PYTHON)
  message(WARNING "minicpm_v2: no Python found (set GSURG_PYTHON): its parity tests are not registered")
elseif(TARGET minicpm_v2_preprocess_dump)
  set(_wrapper_args "")
  if(GSURG_TEST_WRAPPER)
    set(_wrapper_args --wrapper "${GSURG_TEST_WRAPPER}")
  endif()
  add_test(NAME minicpm_v2_preprocess_parity
    COMMAND "${GSURG_PYTHON}" "${PROJECT_SOURCE_DIR}/tests/check_preprocess_minicpmv2.py"
            --dump $<TARGET_FILE:minicpm_v2_preprocess_dump> ${_wrapper_args})
  set_tests_properties(minicpm_v2_preprocess_parity PROPERTIES TIMEOUT 300)
endif()
