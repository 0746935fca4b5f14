# The core's own ctest, which needs no model. The runner's checks against the PyTorch and HF references run
# on a family's tiny model and live with the family (runtime_cpp/families/<name>/tests.cmake).

# The runner's widening of bf16 / fp16 Gemm weights on a mapped load (tests/weight_widening_check.cpp): its
# conversions against ncnn's on every 16-bit value, and a small net of Gemms loaded with it, with ncnn's own
# widening and from an fp32 .bin: the same output bit for bit.
add_executable(gsurg_weight_widening_check tests/weight_widening_check.cpp)
target_link_libraries(gsurg_weight_widening_check PRIVATE gsurg_runner)
add_test(NAME runner_weight_widening COMMAND gsurg_weight_widening_check ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(runner_weight_widening PROPERTIES TIMEOUT 120)

# The program's own name in its usage, which then lists the registered families' rule files (a family's
# alias names its own: the families' tests.cmake).
add_test(NAME runner_usage COMMAND gsurg_run --help)
set_tests_properties(runner_usage PROPERTIES TIMEOUT 60
  PASS_REGULAR_EXPRESSION "usage: gsurg_run --model DIR.*gsurg apply rules/FAMILY.yaml.*[(]FAMILY: [a-z0-9_]+")

# The batch mode's contract where it needs no model (tests/batch_parse_check.cpp): request lines, the lines of
# a file, result lines. Its runs on a model (results equal single runs, bad lines answered with their error,
# unreadable files) are registered by a family's tests.cmake, on its model (runner/README.md says which).
add_executable(gsurg_batch_parse_check tests/batch_parse_check.cpp)
target_link_libraries(gsurg_batch_parse_check PRIVATE gsurg_runner)
add_test(NAME runner_batch_parse COMMAND gsurg_batch_parse_check ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(runner_batch_parse PROPERTIES TIMEOUT 120)
