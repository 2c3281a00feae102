"""Memory accounting: weights, KV caches (dynamic and pre-allocated), the target + draft report, the trace peak."""

import torch

from specdec_lib import DraftModelDrafter, speculative_generate
from specdec_lib.core.memory import (
    MemoryReport,
    cache_bytes,
    format_bytes,
    kv_bytes_per_token,
    kv_cache_bytes_at,
    memory_report,
    weight_bytes,
)
from specdec_lib.core.forward import forward_with_cache
from specdec_lib.core.caches import crop_cache, kv_shape, new_cache


def test_weight_bytes_counts_parameters_and_buffers_once(tiny_llama):
    params = sum(p.numel() for p in tiny_llama.parameters()) * 4
    buffers = sum(b.numel() * b.element_size() for b in tiny_llama.buffers())
    assert weight_bytes(tiny_llama) == params + buffers
    assert weight_bytes(tiny_llama) > weight_bytes(tiny_llama.model.layers[0])


def test_kv_bytes_per_token_formula(tiny_llama, tiny_draft_llama):
    assert kv_bytes_per_token(tiny_llama) == 2 * 2 * 2 * 8 * 4  # K and V, 2 layers, 2 KV heads, head dim 8, fp32
    assert kv_bytes_per_token(tiny_draft_llama) == 2 * 1 * 2 * 8 * 4
    assert kv_cache_bytes_at(tiny_llama) == 128 * 256 and kv_cache_bytes_at(tiny_llama, 10) == 2560


def test_dynamic_cache_bytes_follow_length_and_crop_keeps_storage(tiny_llama, prompt_ids):
    cache = new_cache(tiny_llama)
    assert cache_bytes(cache).in_use == 0
    with torch.inference_mode():
        forward_with_cache(tiny_llama, prompt_ids, cache)
    assert cache_bytes(cache).in_use == cache_bytes(cache).allocated == 7 * kv_bytes_per_token(tiny_llama)
    crop_cache(cache, 3)
    used = cache_bytes(cache)
    assert used.in_use == 3 * kv_bytes_per_token(tiny_llama)
    assert used.allocated == 7 * kv_bytes_per_token(tiny_llama)  # the sliced view keeps the old tensor alive
    with torch.inference_mode():
        forward_with_cache(tiny_llama, torch.tensor([[4]]), cache)  # cat: a new tensor, the old one freed
    assert cache_bytes(cache).allocated == 4 * kv_bytes_per_token(tiny_llama)


def test_preallocated_cache_bytes_allocated_vs_in_use(tiny_llama, prompt_ids):
    cache = new_cache(tiny_llama, "preallocated")
    full = kv_cache_bytes_at(tiny_llama)
    assert cache_bytes(cache).allocated == full and cache_bytes(cache).in_use == 0
    with torch.inference_mode():
        forward_with_cache(tiny_llama, prompt_ids, cache)
    assert cache_bytes(cache) == type(cache_bytes(cache))(in_use=7 * kv_bytes_per_token(tiny_llama), allocated=full)


def test_memory_report(tiny_llama, tiny_draft_llama):
    report = memory_report(tiny_llama, tiny_draft_llama)
    assert isinstance(report, MemoryReport) and report.tokens == 128
    assert report.target_cache == kv_cache_bytes_at(tiny_llama) and report.draft_cache == kv_cache_bytes_at(tiny_draft_llama, 128)
    assert report.total == sum(row["total"] for row in report.rows()[:2]) == report.rows()[2]["total"]
    assert 0 < report.draft_overhead < 1
    assert format_bytes(1536) == "1.5 KiB" and format_bytes(12) == "12 B" and format_bytes(3 * 2**20) == "3.0 MiB"


def test_memory_is_only_measured_when_asked(tiny_llama, tiny_draft_llama, prompt_ids):
    result = speculative_generate(tiny_llama, DraftModelDrafter(tiny_draft_llama), prompt_ids, gamma=4, max_new_tokens=8)
    assert result.trace.peak_kv_bytes == {}  # off the hot path by default


def test_trace_records_peak_kv_bytes_of_both_caches(tiny_llama, tiny_draft_llama, prompt_ids):
    for kind in ("dynamic", "preallocated"):
        drafter = DraftModelDrafter(tiny_draft_llama, cache_kind=kind)
        result = speculative_generate(
            tiny_llama, drafter, prompt_ids, gamma=4, max_new_tokens=20, cache_kind=kind, record_memory=True
        )
        peak = result.trace.peak_kv_bytes
        assert set(peak) == {"target", "draft"}
        if kind == "preallocated":
            # sized to what this generation needs (prompt + max_new_tokens + gamma + 1), not to the whole context
            needed = prompt_ids.shape[1] + 20 + 4 + 1
            assert peak == {"target": kv_cache_bytes_at(tiny_llama, needed),
                            "draft": kv_cache_bytes_at(tiny_draft_llama, needed)}
            assert needed < kv_shape(tiny_llama)["context"]
        else:
            # the target's cache peaks after a verification forward: at most prompt + new tokens + unverified drafts
            total = result.sequence.shape[1]
            assert 7 * kv_bytes_per_token(tiny_llama) < peak["target"] <= (total + 4) * kv_bytes_per_token(tiny_llama)
            assert 0 < peak["draft"] <= (total + 4) * kv_bytes_per_token(tiny_draft_llama)
