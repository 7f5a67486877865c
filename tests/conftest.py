"""Shared fixtures (the real H200 captures in tests/data: tests/data/PROVENANCE.md) and the suite's
markers, set here in one place from what each test costs (BENCHMARKS.md, "The test suite"):

- `slow`: a test that took over 1.5 s on the 2-core machine (a subprocess, a server, a JVM, a browser,
  torch.compile, a build); `bash scripts/test.sh --quick` is `-m "not slow"`, every file keeps its
  cheap tests there. A test listed here that is renamed just runs in the quick selection too.
- `record`: a test under tests/records, which reads back a committed record of a past experiment
  (the H200's calls) against what the code adopts now; it builds and runs nothing.
- `cuda_build`: compiles CUDA (nvcc, or Triton for sm_90) to read the SASS back. CI (CI set) without a
  GPU skips it, as it cannot use the build; SMLENS_TEST_CUDA_BUILD=1 builds anyway, =0 never.
- `xdist_group`: files that share one heavy process (Spark's JVM, Chromium) stay on one worker under
  `-n 2 --dist loadgroup`.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
TESTS = Path(__file__).parent

# An output width is a terminal's: pytest-xdist's workers start with COLUMNS=80 and LINES=24 in their
# environment where pytest was started without them, and smlens takes an exported COLUMNS as the user's
# width, so under `-n 2` piped output was cut to 80 columns (test_views_cli, test_gate_cli). The
# tests that want a width set it themselves (monkeypatch.setenv("COLUMNS", ...)).
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

# Whole files that are slow, and why; then single tests (every parameter of each).
SLOW_FILES = {
    "test_browser.py": "a headless Chromium, 10-20 s a test",
    "test_store_engines.py": "Spark's JVM and DuckDB over a loopback S3 server",
    "test_ingest_properties.py": "hypothesis mutates a real capture a hundred times",
    "test_vllm_cpu.py": "vLLM's CPU engine",
    "test_compiled.py": "torch.compile with Inductor: a C++ build per graph",
}
SLOW_TESTS = {
    "test_annotate.py": {
        "test_compiled_decode_steps_get_layers_and_roles", "test_compiled_decode_steps_get_phase_and_step",
        "test_every_gemm_in_a_layer_has_its_role_and_shape",
        "test_every_kernel_in_a_layer_has_one_of_the_six_roles",
        "test_expert_gemms_get_their_roles_and_shapes", "test_no_ranges_inside_torch_compile",
        "test_phases_steps_and_layers"},
    "test_bad_input.py": {
        "test_a_report_to_standard_output_is_written_there_alone",
        "test_one_bad_cell_is_null_in_a_numeric_column_and_counted", "test_ten_thousand_columns_are_read",
        "test_views_and_show_print_no_numpy_warnings_for_a_store_with_infinities"},
    "test_bench.py": {
        "test_cpu_run_det_bits", "test_cpu_run_renders_and_compares_with_itself"},
    "test_benchmarks.py": {  # each a subprocess: a benchmark's --quick run, run.sh's suite, a script
        "test_every_benchmark_runs_quick", "test_run_sh_models_suite_with_the_fake_ncu",
        "test_bench_profile_gpu_quick_with_the_fake_ncu",
        "test_det_configs_writes_the_tables_the_record_of_call_14_ran_with"},
    "test_examples.py": {  # a subprocess each; the HF program and the CI gate under the fake ncu
        "test_ci_gate_on_main_then_on_a_change", "test_profile_hf_model_under_smlens_profile",
        "test_python_api_prints_the_bundled_captures_gap", "test_python_api_says_in_one_line_what_it_cannot_read",
        "test_query_store_reads_the_store_as_the_views_group_it"},
    "test_capture_sweep.py": {
        "test_a_set_full_details_export_gives_dram_bytes_from_its_rate_and_duration",
        "test_the_same_capture_as_raw_and_details_pages_is_one_device"},
    "test_catalog.py": {
        "test_the_ninth_view_in_the_html_report", "test_the_ninth_view_in_the_terminal"},
    "test_compare.py": {
        "test_a_phase_filtered_report_gives_shares_of_that_phase",
        "test_every_chart_has_the_baseline_and_the_title_names_both_runs",
        "test_kernels_match_by_role_family_and_weights_not_by_tokens",
        "test_per_token_puts_batch_8_and_batch_1_on_equal_terms",
        "test_report_per_token_on_the_command_line"},
    "test_det_gemm_captures.py": {
        "test_profile_det_gemm_into_the_store_then_gate", "test_runs_named_by_impl"},
    "test_deterministic.py": {
        "test_portable_kernel_in_interpreter_has_the_reference_order",
        "test_workload_main_bad_input_one_line"},
    "test_docs.py": {
        "test_every_doc_the_repository_mentions_is_in_it"},
    "test_gate_cli.py": {
        "test_a_quoted_glob_names_every_matching_capture_and_one_matching_none_exits_2",
        "test_stored_runs_by_name_and_tag"},
    "test_gate_h200_changes.py": {
        "test_cublas_in_place_of_det_is_no_time_regression",
        "test_det_in_place_of_cublas_is_caught_and_named",
        "test_the_batch_4_repeats_pass_against_each_other"},
    "test_gate_match.py": {
        "test_a_det_gemm_capture_against_a_decoder_capture_is_refused",
        "test_a_stored_run_named_like_a_file_is_found_before_any_file"},
    "test_generate.py": {
        "test_det_generation_is_batch_invariant", "test_invariant_kernels_compute_norm_and_attention"},
    "test_hf_captures.py": {
        "test_mlp_share_in_json_terminal_and_report"},
    "test_html_cli.py": {
        "test_demo_ingests_the_bundled_capture_prints_the_gap_and_writes_the_report",
        "test_report_of_a_run_against_a_baseline"},
    "test_html_ranks.py": {
        "test_against_a_baseline_each_figure_shows_the_baselines_same_rank",
        "test_communication_per_phase_and_rank_is_the_views",
        "test_the_chart_stacks_compute_transfer_and_wait_per_rank"},
    "test_html_report.py": {
        "test_hostile_names_and_messages_stay_text", "test_missing_metrics_are_dashes_not_zeros",
        "test_one_offline_file", "test_size_is_plotly_plus_under_2_kb_per_kernel"},
    "test_kernel_names.py": {
        "test_kind_and_family_agree_on_every_name_of_the_bundled_captures"},
    "test_profile.py": {
        "test_doctor", "test_doctor_deep_permission", "test_profile_a_program_repeated",
        "test_profile_builtin_workload", "test_time_limit_keeps_what_was_profiled"},
    "test_profile_program.py": {
        "test_a_failing_program_keeps_what_was_profiled", "test_injection_in_a_real_process",
        "test_nothing_profiled_says_why", "test_only_the_started_process_is_ended", "test_profile_a_program",
        "test_setup_range_in_a_real_process", "test_the_program_ends_after_its_last_profiled_forward"},
    "test_store.py": {
        "test_bad_input_exit_2_one_line_store_unchanged", "test_bad_tag", "test_concurrent_ingests_both_land",
        "test_runs_show_rm_json"},
    "test_store_faults.py": {
        "test_a_full_disk_at_every_step_is_one_line_and_nothing_half_stored",
        "test_a_kill_at_every_step_leaves_a_sound_store_and_the_next_command_tidies",
        "test_a_read_only_store_is_read_and_never_written", "test_a_really_full_disk",
        "test_kills_at_random_moments_of_smlens_ingest"},
    "test_store_repair.py": {
        "test_a_sound_store_checks_clean", "test_check_names_the_damage_and_repair_mends_it"},
    "test_store_s3.py": {
        "test_a_killed_cli_writer_leaves_nothing_listed", "test_a_writer_killed_around_its_commit_on_s3",
        "test_a_writer_killed_at_any_step_leaves_nothing_listed",
        "test_a_writer_that_loses_the_race_commits_next", "test_every_store_command_on_s3",
        "test_not_a_store_and_no_store", "test_profile_into_an_s3_store",
        "test_racing_creates_of_one_key_have_one_winner",
        "test_reingest_renames_and_rm_of_several_runs_on_s3",
        "test_runs_table_is_a_checkpoint_the_log_is_the_truth", "test_smlens_store_env_names_the_store",
        "test_store_check_and_repair_on_s3", "test_the_same_file_racing_is_stored_once",
        "test_two_writer_processes_both_land_repeatedly", "test_unusable_s3_store_is_one_line_exit_2",
        "test_writers_creating_the_store_at_once"},
    "test_tensor_parallel.py": {
        "test_a_process_group_that_cannot_start", "test_a_programs_collectives_are_timed_per_rank_with_gloo",
        "test_a_rank_that_dies_stops_the_others", "test_gate_compares_tensor_parallel_runs",
        "test_groups_per_rank_only_for_a_run_with_ranks", "test_profile_tp_end_to_end",
        "test_profile_tp_program_merges_its_timed_collectives",
        "test_profile_tp_program_ranks_from_gpus_and_a_rank_that_dies",
        "test_terminal_lists_each_timed_collective", "test_terminal_shows_ranks_and_communication",
        "test_the_sharded_workload_with_gloo_times_every_all_reduce",
        "test_the_verdict_of_a_tp_run_names_ranks_and_communication"},
    "test_terminal_output.py": {
        "test_runs_keeps_every_name_whole_at_80_columns"},
    "test_verdict.py": {
        "test_a_unit_not_measured_is_never_read_as_latency", "test_views_json_carries_the_verdict"},
    "test_views_checks.py": {
        "test_every_step_of_the_gap_is_at_most_the_one_before"},
    "test_views_cli.py": {
        "test_a_number_and_its_unit_stay_on_one_line_at_80_columns",
        "test_a_phase_filter_gives_shares_of_that_phase_in_every_output",
        "test_piped_output_is_as_wide_as_its_tables", "test_printer_fits_80_columns_and_cuts_nothing",
        "test_sections_run_prints_na_not_zero", "test_table_starts_with_the_gap_then_each_view"},
    "test_views_public.py": {
        "test_every_public_capture_views_and_reports",
        "test_the_real_decode12_report_with_one_kernel_unread_views_and_reports"},
    "test_vocabulary.py": {
        "test_no_module_spells_out_the_vocabulary_again"},
    "test_workloads.py": {
        "test_module_runs_from_the_command_line"},
}
# Files whose tests share one process that a worker starts once (module-scoped fixtures).
XDIST_GROUPS = {"test_store_engines.py": "jvm", "test_browser.py": "chromium"}


def _gpu_visible() -> bool:
    return Path("/dev/nvidia0").exists() or any(Path("/proc/driver/nvidia/gpus").glob("*"))


def cuda_build_skip_reason() -> str | None:
    """Why a CUDA build is not compiled here, None where it is."""
    choice = os.environ.get("SMLENS_TEST_CUDA_BUILD", "")
    if choice == "1":
        return None
    if choice == "0":
        return "SMLENS_TEST_CUDA_BUILD=0: no CUDA build"
    if os.environ.get("CI") and not _gpu_visible():
        return "CI without a GPU cannot use this CUDA build, so it is not compiled (SMLENS_TEST_CUDA_BUILD=1 builds it)"
    return None


def pytest_collection_modifyitems(config, items):
    cuda_skip = cuda_build_skip_reason()
    for item in items:
        path = Path(str(item.fspath))
        name = path.name
        function = getattr(item, "originalname", None) or item.name.split("[")[0]
        if TESTS / "records" in path.parents:
            item.add_marker(pytest.mark.record)
        if item.get_closest_marker("cuda_build") is not None:
            item.add_marker(pytest.mark.slow)
            if cuda_skip:
                item.add_marker(pytest.mark.skip(reason=cuda_skip))
        if name in SLOW_FILES or function in SLOW_TESTS.get(name, ()):
            item.add_marker(pytest.mark.slow)
        if name in XDIST_GROUPS:
            item.add_marker(pytest.mark.xdist_group(XDIST_GROUPS[name]))

# Shapes of the targeted/sections captures (their NVTX ranges carry none): PROVENANCE.md.
TARGETED_SHAPES = {
    "prefill/qkv_proj": (2048, 3072, 2048), "prefill/o_proj": (2048, 2048, 2048),
    "prefill/gate_up_proj": (2048, 11264, 2048), "prefill/down_proj": (2048, 2048, 5632),
    "decode/qkv_proj": (4, 3072, 2048), "decode/o_proj": (4, 2048, 2048),
    "decode/gate_up_proj": (4, 11264, 2048), "decode/down_proj": (4, 2048, 5632),
}


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def targeted_capture():
    from profiler.ingest.capture import read_capture

    return read_capture(DATA / "targeted_raw.csv", shapes=TARGETED_SHAPES)


@pytest.fixture(scope="session")
def sections_capture():
    from profiler.ingest.capture import read_capture

    return read_capture(DATA / "sections_raw.csv", shapes=TARGETED_SHAPES)


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 server (moto) on 127.0.0.1 for the session; see tests/s3server.py."""
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    from tests.s3server import s3_server as start

    with start() as server:
        yield server


@pytest.fixture()
def s3_store(s3_server, monkeypatch) -> str:
    """A fresh bucket on the loopback server, the AWS environment pointing at it, and the store URL."""
    import uuid

    bucket = s3_server.make_bucket(f"smlens-{uuid.uuid4().hex[:12]}")
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    return f"s3://{bucket}/team/store"
