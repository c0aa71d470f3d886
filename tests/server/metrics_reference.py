"""The reference for troupe's /metrics: vLLM's PrometheusStatLogger metric definitions (names,
help texts, label names, histogram buckets, as in vllm/v1/metrics/loggers.py, v0.11),
instantiated with prometheus_client itself (Debian's python3-prometheus-client).

compare(text, ...) checks that troupe's exposition
- parses with prometheus_client's own text parser,
- has every family vLLM exports that troupe can measure, with the same type and help text,
- and that, given the same values, prometheus_client writes the same lines byte for byte
  (every sample but histogram _sum, whose observations are not recoverable from the buckets,
  and prometheus_client's _created series, which troupe does not export).
"""
import sys

LABELS = ["model_name", "engine"]
TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
TOKEN_LATENCY = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                 7.5, 10.0, 20.0, 40.0, 80.0]
REQUEST_LATENCY = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]


def build_1_2_5_buckets(max_value):
    out, exponent = [], 0
    while True:
        for m in (1, 2, 5):
            v = m * 10 ** exponent
            if v > max_value:
                return out
            out.append(v)
        exponent += 1


def definitions(max_model_len):
    """(kind, name, help, buckets) as vLLM's logger declares them."""
    tokens = build_1_2_5_buckets(max_model_len)
    return [
        ("gauge", "vllm:num_requests_running", "Number of requests in model execution batches.", None),
        ("gauge", "vllm:num_requests_waiting", "Number of requests waiting to be processed.", None),
        ("gauge", "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", None),
        ("gauge", "vllm:gpu_cache_usage_perc",
         "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
         None),
        ("counter", "vllm:prefix_cache_queries",
         "Prefix cache queries, in terms of number of queried tokens.", None),
        ("counter", "vllm:prefix_cache_hits",
         "Prefix cache hits, in terms of number of cached tokens.", None),
        ("counter", "vllm:gpu_prefix_cache_queries",
         "GPU prefix cache queries, in terms of number of queriedtokens. DEPRECATED: Use "
         "vllm:prefix_cache_queries instead.", None),
        ("counter", "vllm:gpu_prefix_cache_hits",
         "GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use "
         "vllm:prefix_cache_hits instead.", None),
        ("counter", "vllm:num_preemptions", "Cumulative number of preemption from the engine.", None),
        ("counter", "vllm:prompt_tokens", "Number of prefill tokens processed.", None),
        ("counter", "vllm:generation_tokens", "Number of generation tokens processed.", None),
        ("histogram", "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens),
        ("histogram", "vllm:request_generation_tokens", "Number of generation tokens processed.",
         tokens),
        ("histogram", "vllm:iteration_tokens_total",
         "Histogram of number of tokens per engine_step.",
         [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]),
        ("histogram", "vllm:request_max_num_generation_tokens",
         "Histogram of maximum number of requested generation tokens.", tokens),
        ("histogram", "vllm:request_params_n", "Histogram of the n request parameter.",
         [1, 2, 5, 10, 20]),
        ("histogram", "vllm:request_params_max_tokens",
         "Histogram of the max_tokens request parameter.", tokens),
        ("histogram", "vllm:time_to_first_token_seconds",
         "Histogram of time to first token in seconds.", TTFT),
        ("histogram", "vllm:time_per_output_token_seconds",
         "Histogram of time per output token in seconds.DEPRECATED: Use "
         "vllm:inter_token_latency_seconds instead.", TOKEN_LATENCY),
        ("histogram", "vllm:inter_token_latency_seconds",
         "Histogram of inter-token latency in seconds.", TOKEN_LATENCY),
        ("histogram", "vllm:request_time_per_output_token_seconds",
         "Histogram of time_per_output_token_seconds per request.", TOKEN_LATENCY),
        ("histogram", "vllm:e2e_request_latency_seconds",
         "Histogram of e2e request latency in seconds.", REQUEST_LATENCY),
        ("histogram", "vllm:request_queue_time_seconds",
         "Histogram of time spent in WAITING phase for request.", REQUEST_LATENCY),
        ("histogram", "vllm:request_inference_time_seconds",
         "Histogram of time spent in RUNNING phase for request.", REQUEST_LATENCY),
        ("histogram", "vllm:request_prefill_time_seconds",
         "Histogram of time spent in PREFILL phase for request.", REQUEST_LATENCY),
        ("histogram", "vllm:request_decode_time_seconds",
         "Histogram of time spent in DECODE phase for request.", REQUEST_LATENCY),
    ]


def _import():
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        # Debian's package, when python3 is not Debian's own interpreter.
        sys.path.append("/usr/lib/python3/dist-packages")
    import prometheus_client
    return prometheus_client


def available():
    try:
        _import()
        return True
    except ImportError:
        return False


def compare(text, model_name, max_model_len):
    pc = _import()
    from prometheus_client.parser import text_string_to_metric_families

    ours = {f.name: f for f in text_string_to_metric_families(text)}
    registry = pc.CollectorRegistry()
    expected_lines = []
    for kind, name, doc, buckets in definitions(max_model_len):
        # A counter's family drops _total; a histogram keeps it (vllm:iteration_tokens_total).
        base = name[:-len("_total")] if kind == "counter" and name.endswith("_total") else name
        assert base in ours, f"{name} missing from /metrics"
        fam = ours[base]
        assert fam.type == kind, (name, fam.type, kind)
        assert fam.documentation == doc, (name, fam.documentation, doc)
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in fam.samples}
        labels = {"model_name": model_name, "engine": "0"}
        key = tuple(sorted(labels.items()))
        if kind == "gauge":
            m = pc.Gauge(name, doc, LABELS, registry=registry)
            m.labels(model_name, "0").set(samples[(name, key)])
        elif kind == "counter":
            m = pc.Counter(name, doc, LABELS, registry=registry)
            m.labels(model_name, "0").inc(samples[(name + "_total", key)])
        else:
            m = pc.Histogram(name, doc, LABELS, buckets=buckets, registry=registry)
            child = m.labels(model_name, "0")
            # Replay each bucket's count as observations at its upper bound (le is inclusive).
            prev = 0.0
            for b in buckets:
                le = pc.utils.floatToGoString(b)
                cum = samples[(name + "_bucket", tuple(sorted({**labels, "le": le}.items())))]
                for _ in range(int(cum - prev)):
                    child.observe(b)
                prev = cum
            total = samples[(name + "_count", key)]
            for _ in range(int(total - prev)):
                child.observe(float("inf"))
    # vLLM's request_success counter, with its finished_reason label.
    success = ours["vllm:request_success"]
    assert success.type == "counter" and success.documentation == \
        "Count of successfully processed requests.", success
    rs = pc.Counter("vllm:request_success", "Count of successfully processed requests.",
                    LABELS + ["finished_reason"], registry=registry)
    for s in success.samples:
        rs.labels(s.labels["model_name"], s.labels["engine"], s.labels["finished_reason"]).inc(s.value)
    reference = pc.generate_latest(registry).decode()
    mine = set(text.splitlines())
    for line in reference.splitlines():
        if "_created" in line or line.split("{")[0].endswith("_sum"):
            continue
        assert line in mine, f"prometheus_client writes\n  {line}\nwhich troupe's /metrics lacks"
    return True
