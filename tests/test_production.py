"""specdec_lib.teaching.production: every library name the runtime tables cite exists; the runtime names cite their pages;
vLLM's counters computed from a trace and read from a /metrics page give the course's acceptance metrics."""

import pytest

from specdec_lib.teaching import production
from specdec_lib.teaching.production import LibraryName, RuntimeName, parse_prometheus_counters, vllm_counters
from specdec_lib.core.trace import RoundRecord, Trace, acceptance_rate, mean_acceptance_length, per_position_acceptance


def test_every_library_name_the_tables_cite_exists_in_the_installed_versions():
    names = production.library_names()
    assert len(names) >= 20
    assert production.missing_library_names() == []


@pytest.mark.parametrize("name, exists", [
    (LibraryName("specdec_lib", "speculative_generate", "gamma"), True),
    (LibraryName("specdec_lib", "speculative_generate", "num_speculative_tokens"), False),  # vLLM's name, not ours
    (LibraryName("specdec_lib", "NoSuchDrafter"), False),
    (LibraryName("specdec_lib.no_such_module", "anything"), False),
    (LibraryName("transformers", "GenerationConfig", "prompt_lookup_num_tokens", config_field=True), True),
    (LibraryName("transformers", "GenerationConfig", "prompt_lookup_max", config_field=True), False),
])
def test_exists_checks_module_attribute_and_parameter(name, exists):
    assert name.exists() is exists


def test_names_render_as_a_reader_writes_them():
    assert str(LibraryName("specdec_lib", "PromptLookupDrafter", "max_ngram")) == "PromptLookupDrafter(max_ngram=)"
    assert str(LibraryName("transformers", "GenerationConfig", "num_assistant_tokens", config_field=True)) == (
        "GenerationConfig.num_assistant_tokens")
    assert RuntimeName("x", "https://a", verified=False, note="check it").cell() == "x (unverified) — check it"


def test_every_runtime_name_cites_a_page_and_every_row_covers_the_three_runtimes():
    for entry in (*production.SETTINGS, *production.METRICS):
        assert set(entry.runtimes) == set(production.RUNTIMES), entry.concept
        for name in entry.runtimes.values():
            if name is not None:
                assert name.source.startswith("https://") and name.text, entry.concept
    assert all(url.startswith("https://") for url in production.sources())


def test_the_tables_have_one_row_per_entry_and_mark_unverified_names():
    settings = production.settings_table().splitlines()
    assert len(settings) == 2 + len(production.SETTINGS)
    assert settings[0] == "| setting | specdec_lib | transformers | vLLM | SGLang | TensorRT-LLM |"
    assert "num_speculative_tokens" in production.settings_table() and "(unverified)" in production.settings_table()
    assert len(production.metrics_table().splitlines()) == 2 + len(production.METRICS)


def hand_made_trace(accepted, gamma=3):
    """A prefill round, then one round per entry of ``accepted`` drafting ``gamma`` tokens each."""
    rounds = [RoundRecord(0, 0, 1, 0.0, 0.0, 0, "prefill")]
    rounds += [RoundRecord(gamma, a, a + 1, 0.0, 0.0, gamma, "bonus" if a == gamma else "recovered") for a in accepted]
    return Trace(start_time=0.0, rounds=rounds)


def test_vllm_counters_of_a_trace_give_its_acceptance_metrics_by_vllms_formulas():
    trace = hand_made_trace([0, 3, 1, 2, 3])
    counters = vllm_counters(trace)
    assert counters == {"num_drafts": 5, "num_draft_tokens": 15, "num_accepted_tokens": 9,
                        "num_accepted_tokens_per_pos": [4, 3, 2]}
    assert counters["num_accepted_tokens"] / counters["num_draft_tokens"] == acceptance_rate(trace)
    assert 1 + counters["num_accepted_tokens"] / counters["num_drafts"] == mean_acceptance_length(trace)
    assert [a / counters["num_drafts"] for a in counters["num_accepted_tokens_per_pos"]] == (
        per_position_acceptance(trace))
    assert vllm_counters(trace, num_speculative_tokens=5)["num_accepted_tokens_per_pos"] == [4, 3, 2, 0, 0]


def test_a_trace_without_drafts_has_zero_counters():
    assert vllm_counters(Trace(start_time=0.0, rounds=[RoundRecord(0, 0, 1, 0.0, 0.0, 0, "prefill")])) == {
        "num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "num_accepted_tokens_per_pos": []}


METRICS_PAGE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 5.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 15.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 2.0
vllm:generation_tokens_total{model_name="m"} 123.0
"""


def test_the_counters_are_read_from_a_metrics_page_in_position_order():
    assert parse_prometheus_counters(METRICS_PAGE) == vllm_counters(hand_made_trace([0, 3, 1, 2, 3]))


def test_two_engines_are_summed_and_a_page_without_speculation_reads_zero():
    second = METRICS_PAGE.replace('engine="0"', 'engine="1"')
    doubled = parse_prometheus_counters(METRICS_PAGE + second)
    assert doubled["num_drafts"] == 10 and doubled["num_accepted_tokens_per_pos"] == [8, 6, 4]
    assert parse_prometheus_counters('vllm:generation_tokens_total{model_name="m"} 1.0\n') == {
        "num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "num_accepted_tokens_per_pos": []}


def test_the_delta_of_two_readings_counts_only_the_requests_between_them():
    before = parse_prometheus_counters('vllm:generation_tokens_total{model_name="m"} 1.0\n')  # a fresh server
    after = parse_prometheus_counters(METRICS_PAGE)
    assert production.counter_delta(before, after) == after
    assert production.counter_delta(after, after) == {
        "num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "num_accepted_tokens_per_pos": [0, 0, 0]}
