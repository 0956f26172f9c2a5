{{/*
Prometheus recording and alerting rules, as lists of rule groups.

The PrometheusRule template includes both; rules/render.py renders them with the default values
into rules/recording.yaml and rules/alerts.yaml (promtool checks and unit-tests those files, and
a test asserts they equal this template's output). Only metrics from docs/exported-metrics.md are used.
Means are sum(rate(x_sum)) / sum(rate(x_count)), exact across replicas.

Prometheus's own {{ $labels }} / {{ $value }} templates are escaped as {{`{{ ... }}`}} here.
*/}}

{{- define "rag-monitor.rules.recording" -}}
- name: ragmon-recording-quality
  rules:
{{- range $window := list "5m" "1h" "6h" }}
    - record: agent:ragmon_evaluation_score_ratio:mean{{ $window }}
      expr: |-
        sum by (agent, metric, evaluator) (rate(ragmon_evaluation_score_ratio_sum[{{ $window }}]))
        /
        (sum by (agent, metric, evaluator) (rate(ragmon_evaluation_score_ratio_count[{{ $window }}])) > 0)
{{- end }}
{{- range $window := list "1h" "6h" }}
    - record: agent:ragmon_evaluation_score_ratio_count:increase{{ $window }}
      expr: |-
        sum by (agent, metric, evaluator) (increase(ragmon_evaluation_score_ratio_count[{{ $window }}]))
{{- end }}
{{- /*
Population estimates of the judge's scores (docs/metrics.md, "Population estimates"), per agent,
metric, evaluator and quantity (the mean score, or the share below the metric's threshold), from
two sets of running sums: ragmon_estimate_terms_total (the traffic, and the uniform draw weighted
by inverse inclusion probability) and ragmon_estimate_weighted_terms_total (every judged trace,
weighted by its inverse chance of being judged by the draw or as a priority). The uniform draw's
estimate, and the prediction-powered one (tier 0's calibrated prediction over every trace plus
the judge's correction on every judged trace), each with its cluster-robust standard error
(conversations are the unit of the draw) and 95% bounds. The same arithmetic as
monitor/estimates/estimator.py; rules/tests/estimates.yaml holds the two to each other.
*/}}
{{- range $window := list "1h" "6h" }}
{{- $t := printf "agent:ragmon_estimate_terms:increase%s" $window }}
{{- $j := printf "agent:ragmon_estimate_weighted_terms:increase%s" $window }}
{{- $by := "sum by (agent, metric, evaluator, quantity)" }}
    - record: {{ $t }}
      expr: |-
        sum by (agent, metric, evaluator, quantity, term) (increase(ragmon_estimate_terms_total[{{ $window }}]))
    - record: {{ $j }}
      expr: |-
        sum by (agent, metric, evaluator, quantity, term) (increase(ragmon_estimate_weighted_terms_total[{{ $window }}]))
    - record: agent:ragmon_estimate_judged:increase{{ $window }}
      expr: |-
        {{ $by }} ({{ $t }}{term="judged"})
    - record: agent:ragmon_estimate_uniform:mean{{ $window }}
      expr: |-
        {{ $by }} ({{ $t }}{term="y"})
        /
        ({{ $by }} ({{ $t }}{term="m"}) > 0)
    - record: agent:ragmon_estimate_uniform:stderr{{ $window }}
      expr: |-
        sqrt(
          clamp_min(
            {{ $by }} ({{ $t }}{term="clusters"})
            / ({{ $by }} ({{ $t }}{term="clusters"}) - 1 > 0)
            * (1 - {{ $by }} ({{ $t }}{term="judged"}) / {{ $by }} ({{ $t }}{term="m"}))
            * (
              {{ $by }} ({{ $t }}{term="yy"})
              - 2 * agent:ragmon_estimate_uniform:mean{{ $window }} * {{ $by }} ({{ $t }}{term="ym"})
              + agent:ragmon_estimate_uniform:mean{{ $window }} ^ 2 * {{ $by }} ({{ $t }}{term="mm"})
            ),
            0
          )
        )
        /
        {{ $by }} ({{ $t }}{term="m"})
    - record: agent:ragmon_estimate_ppi:correction{{ $window }}
      expr: |-
        (
          {{ $by }} ({{ $j }}{term="y"})
          -
          {{ $by }} ({{ $j }}{term="f"})
        )
        /
        ({{ $by }} ({{ $j }}{term="m"}) > 0)
        and
        {{ $by }} ({{ $t }}{term="clusters"}) > 1
    - record: agent:ragmon_estimate_ppi:mean{{ $window }}
      expr: |-
        {{ $by }} ({{ $t }}{term="predicted"})
        /
        ({{ $by }} ({{ $t }}{term="traces"}) > 0)
        +
        agent:ragmon_estimate_ppi:correction{{ $window }}
    - record: agent:ragmon_estimate_ppi:spread{{ $window }}
      expr: |-
        (
          {{ $by }} ({{ $j }}{term="yy"})
          - 2 * {{ $by }} ({{ $j }}{term="yf"})
          + {{ $by }} ({{ $j }}{term="ff"})
        )
        - 2 * agent:ragmon_estimate_ppi:correction{{ $window }}
          * ({{ $by }} ({{ $j }}{term="ym"}) - {{ $by }} ({{ $j }}{term="fm"}))
        + agent:ragmon_estimate_ppi:correction{{ $window }} ^ 2 * {{ $by }} ({{ $j }}{term="mm"})
    - record: agent:ragmon_estimate_ppi:stderr{{ $window }}
      expr: |-
        sqrt(
          clamp_min(
            {{ $by }} ({{ $j }}{term="clusters"})
            / ({{ $by }} ({{ $j }}{term="clusters"}) - 1 > 0)
            * agent:ragmon_estimate_ppi:spread{{ $window }},
            0
          )
        )
        /
        {{ $by }} ({{ $j }}{term="m"})
{{- range $method := list "uniform" "ppi" }}
    - record: agent:ragmon_estimate_{{ $method }}:lower{{ $window }}
      expr: |-
        clamp_min(agent:ragmon_estimate_{{ $method }}:mean{{ $window }} - 1.96 * agent:ragmon_estimate_{{ $method }}:stderr{{ $window }}, 0)
    - record: agent:ragmon_estimate_{{ $method }}:upper{{ $window }}
      expr: |-
        clamp_max(agent:ragmon_estimate_{{ $method }}:mean{{ $window }} + 1.96 * agent:ragmon_estimate_{{ $method }}:stderr{{ $window }}, 1)
{{- end }}
{{- end }}
    - record: agent:ragmon_evaluation_unmeasured:ratio1h
      expr: |-
        sum by (agent, metric, evaluator) (rate(ragmon_evaluation_unmeasured_total[1h]))
        /
        (
          sum by (agent, metric, evaluator) (rate(ragmon_evaluation_unmeasured_total[1h]))
          +
          (
            sum by (agent, metric, evaluator) (rate(ragmon_evaluation_score_ratio_count[1h]))
            or
            sum by (agent, metric, evaluator) (rate(ragmon_evaluation_unmeasured_total[1h])) * 0
          )
        )
    - record: agent:ragmon_evaluations:rate5m
      expr: |-
        sum by (agent, evaluator, outcome) (rate(ragmon_evaluations_total[5m]))
    - record: agent:ragmon_statements_unsupported:ratio1h
      expr: |-
        sum by (agent, evaluator) (rate(ragmon_statements_total{outcome="unsupported"}[1h]))
        /
        (sum by (agent, evaluator) (rate(ragmon_statements_total[1h])) > 0)
{{- /*
Tier 0 (the heuristic evaluator scores every trace, with or without a judge): each agent's mean
support over the last hour against its own trailing baseline, the 7 days before that hour, and
how much its hourly mean normally moves (a robust spread: the interquartile range of the hourly
means over those 7 days / 1.349, the standard deviation of normal data, which one earlier step
change does not inflate the way a standard deviation would).
*/}}
    - record: agent:ragmon_tier0_support:mean1h
      expr: |-
        sum by (agent) (rate(ragmon_evaluation_score_ratio_sum{metric="support", evaluator="heuristic"}[1h]))
        /
        (sum by (agent) (rate(ragmon_evaluation_score_ratio_count{metric="support", evaluator="heuristic"}[1h])) > 0)
    - record: agent:ragmon_tier0_support:mean7d_1h_ago
      expr: |-
        sum by (agent) (rate(ragmon_evaluation_score_ratio_sum{metric="support", evaluator="heuristic"}[7d] offset 1h))
        /
        (sum by (agent) (rate(ragmon_evaluation_score_ratio_count{metric="support", evaluator="heuristic"}[7d] offset 1h)) > 0)
    - record: agent:ragmon_tier0_support:spread1h_7d_1h_ago
      expr: |-
        (
          quantile_over_time(0.75, agent:ragmon_tier0_support:mean1h[7d:] offset 1h)
          -
          quantile_over_time(0.25, agent:ragmon_tier0_support:mean1h[7d:] offset 1h)
        ) / 1.349
    - record: agent:ragmon_tier0_support_count:increase1h
      expr: |-
        sum by (agent) (increase(ragmon_evaluation_score_ratio_count{metric="support", evaluator="heuristic"}[1h]))
    - record: agent:ragmon_tier0_support_count:increase7d_1h_ago
      expr: |-
        sum by (agent) (increase(ragmon_evaluation_score_ratio_count{metric="support", evaluator="heuristic"}[7d] offset 1h))
- name: ragmon-recording-conversations
  rules:
{{- range $window := list "5m" "1h" "6h" }}
    - record: agent:ragmon_turn_hallucination_ratio:mean{{ $window }}
      expr: |-
        sum by (agent, evaluator) (rate(ragmon_turn_hallucination_ratio_sum[{{ $window }}]))
        /
        (sum by (agent, evaluator) (rate(ragmon_turn_hallucination_ratio_count[{{ $window }}])) > 0)
{{- end }}
    - record: agent:ragmon_turn_hallucination_ratio:mean1d_6h_ago
      expr: |-
        sum by (agent, evaluator) (rate(ragmon_turn_hallucination_ratio_sum[1d] offset 6h))
        /
        (sum by (agent, evaluator) (rate(ragmon_turn_hallucination_ratio_count[1d] offset 6h)) > 0)
{{- range $window := list "1h" "6h" }}
    - record: agent:ragmon_turn_hallucination_ratio_count:increase{{ $window }}
      expr: |-
        sum by (agent, evaluator) (increase(ragmon_turn_hallucination_ratio_count[{{ $window }}]))
{{- end }}
    - record: agent:ragmon_turn_hallucination_ratio_count:increase1d_6h_ago
      expr: |-
        sum by (agent, evaluator) (increase(ragmon_turn_hallucination_ratio_count[1d] offset 6h))
{{- range $window := list "5m" "1h" "6h" }}
    - record: agent:ragmon_turn_drift_ratio:mean{{ $window }}
      expr: |-
        sum by (agent) (rate(ragmon_turn_drift_ratio_sum[{{ $window }}]))
        /
        (sum by (agent) (rate(ragmon_turn_drift_ratio_count[{{ $window }}])) > 0)
{{- end }}
    - record: agent:ragmon_turn_drift_ratio:mean1d_6h_ago
      expr: |-
        sum by (agent) (rate(ragmon_turn_drift_ratio_sum[1d] offset 6h))
        /
        (sum by (agent) (rate(ragmon_turn_drift_ratio_count[1d] offset 6h)) > 0)
{{- range $window := list "1h" "6h" }}
    - record: agent:ragmon_turn_drift_ratio_count:increase{{ $window }}
      expr: |-
        sum by (agent) (increase(ragmon_turn_drift_ratio_count[{{ $window }}]))
{{- end }}
    - record: agent:ragmon_turn_drift_ratio_count:increase1d_6h_ago
      expr: |-
        sum by (agent) (increase(ragmon_turn_drift_ratio_count[1d] offset 6h))
- name: ragmon-recording-pipeline
  rules:
    - record: agent:ragmon_traces_processed:rate5m
      expr: |-
        sum by (agent, outcome) (rate(ragmon_traces_processed_total[5m]))
    - record: topic:ragmon_kafka_consumer_lag_messages:sum
      expr: |-
        sum by (topic) (max by (topic, partition) (ragmon_kafka_consumer_lag_messages))
    - record: evaluator:ragmon_judge_requests:increase10m
      expr: |-
        sum by (evaluator) (increase(ragmon_judge_requests_total[10m]))
    - record: evaluator:ragmon_judge_requests:error_ratio10m
      expr: |-
        sum by (evaluator) (rate(ragmon_judge_requests_total{outcome!="ok"}[10m]))
        /
        (sum by (evaluator) (rate(ragmon_judge_requests_total[10m])) > 0)
{{- end }}

{{- define "rag-monitor.rules.labels" -}}
severity: {{ .severity }}
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- /*
An alert description's interval bound: the recorded bound of the same agent, metric, evaluator
and quantity as the alert, looked up when the alert fires (Prometheus's `query` template).
*/}}
{{- define "rag-monitor.rules.bound" -}}
{{`{{ with printf "agent:ragmon_estimate_ppi:`}}{{ .bound }}{{ .window }}{{`{agent=%q, metric=%q, evaluator=%q, quantity=%q}" $labels.agent $labels.metric $labels.evaluator $labels.quantity | query }}{{ . | first | value | printf "%.3f" }}{{ end }}`}}
{{- end }}

{{- define "rag-monitor.rules.alerts" -}}
{{- $a := .Values.alerts }}
{{- $base := trimSuffix "/" $a.runbookBaseUrl }}
{{- $extra := $a.additionalLabels | default dict }}
{{- $review := trimSuffix "/" ($a.reviewUrl | default "") -}}
- name: ragmon-alerts-quality
  rules:
{{- $quality := list
  (list "faithfulness" "RagmonFaithfulnessLow" "Faithfulness")
  (list "answerRelevancy" "RagmonAnswerRelevancyLow" "Answer relevancy")
  (list "contextRelevancy" "RagmonContextRelevancyLow" "Context relevancy") }}
{{- range $q := $quality }}
{{- $c := index $a (index $q 0) }}
{{- if $c.enabled }}
{{- $sel := printf "metric=%q, quantity=\"mean\", evaluator=~%q" $c.metric $a.quality.evaluators }}
    - alert: {{ index $q 1 }}
      expr: |-
        agent:ragmon_estimate_ppi:mean1h{ {{- $sel -}} }
        and
        (
          agent:ragmon_estimate_ppi:upper1h{ {{- $sel -}} } < {{ $c.threshold }}
          and
          agent:ragmon_estimate_ppi:upper6h{ {{- $sel -}} } < {{ $c.threshold }}
        )
        and
        agent:ragmon_estimate_judged:increase1h{ {{- $sel -}} } >= {{ $a.quality.minSamples }}
      for: {{ $a.quality.for }}
      labels:
        {{- include "rag-monitor.rules.labels" (dict "severity" $c.severity "extra" $extra) | nindent 8 }}
      annotations:
        summary: '{{ index $q 2 }} of agent {{`{{ $labels.agent }}`}} below {{ $c.threshold }} ({{`{{ $labels.evaluator }}`}} evaluator)'
        description: 'The estimated mean {{ $c.metric }} of all traffic of agent {{`{{ $labels.agent }}`}}, as the {{`{{ $labels.evaluator }}`}} judge would score it (tier 0 on every trace corrected by the judge on the traces it judged, each weighted by its inverse chance of being judged), is {{`{{ $value | printf "%.3f" }}`}} over the last hour, 95% interval {{ include "rag-monitor.rules.bound" (dict "bound" "lower" "window" "1h") }} to {{ include "rag-monitor.rules.bound" (dict "bound" "upper" "window" "1h") }}: the whole interval is below {{ $c.threshold }} over the last hour and over 6 hours (upper bound {{ include "rag-monitor.rules.bound" (dict "bound" "upper" "window" "6h") }}), from at least {{ $a.quality.minSamples }} judged traces of the uniform draw in the hour.'
        runbook_url: {{ printf "%s/%s.md" $base (index $q 1) }}
        {{- with $review }}
        review_url: '{{ . }}/review?agent={{`{{ $labels.agent }}`}}&metric={{ $c.metric }}&since=6h'
        {{- end }}
{{- end }}
{{- end }}
{{- with $a.unfaithfulShare }}
{{- if .enabled }}
{{- $sel := printf "metric=\"faithfulness\", quantity=\"below\", evaluator=~%q" $a.quality.evaluators }}
    - alert: RagmonUnfaithfulShareHigh
      expr: |-
        agent:ragmon_estimate_ppi:mean1h{ {{- $sel -}} }
        and
        (
          agent:ragmon_estimate_ppi:lower1h{ {{- $sel -}} } > {{ .maxShare }}
          and
          agent:ragmon_estimate_ppi:lower6h{ {{- $sel -}} } > {{ .maxShare }}
        )
        and
        agent:ragmon_estimate_judged:increase1h{ {{- $sel -}} } >= {{ $a.quality.minSamples }}
      for: {{ $a.quality.for }}
      labels:
        {{- include "rag-monitor.rules.labels" (dict "severity" .severity "extra" $extra) | nindent 8 }}
      annotations:
        summary: 'More than {{ .maxShare }} of the answers of agent {{`{{ $labels.agent }}`}} unfaithful ({{`{{ $labels.evaluator }}`}} evaluator)'
        description: 'The estimated share of all answers of agent {{`{{ $labels.agent }}`}} that the {{`{{ $labels.evaluator }}`}} judge would find below the faithfulness threshold (estimates.thresholds) is {{`{{ $value | printf "%.3f" }}`}} over the last hour, 95% interval {{ include "rag-monitor.rules.bound" (dict "bound" "lower" "window" "1h") }} to {{ include "rag-monitor.rules.bound" (dict "bound" "upper" "window" "1h") }}: the whole interval is above {{ .maxShare }} over the last hour and over 6 hours (lower bound {{ include "rag-monitor.rules.bound" (dict "bound" "lower" "window" "6h") }}), from at least {{ $a.quality.minSamples }} judged traces of the uniform draw in the hour.'
        runbook_url: {{ printf "%s/RagmonUnfaithfulShareHigh.md" $base }}
        {{- with $review }}
        review_url: '{{ . }}/review?agent={{`{{ $labels.agent }}`}}&metric=faithfulness&since=6h'
        {{- end }}
{{- end }}
{{- end }}
{{- with $a.tier0Support }}
{{- if .enabled }}
    - alert: RagmonTier0SupportDrop
      expr: |-
        (
          agent:ragmon_tier0_support:mean7d_1h_ago - agent:ragmon_tier0_support:mean1h
        )
        > clamp_min({{ .sigmas }} * agent:ragmon_tier0_support:spread1h_7d_1h_ago, {{ .minDrop }})
        and
        agent:ragmon_tier0_support_count:increase1h >= {{ .minSamples }}
        and
        agent:ragmon_tier0_support_count:increase7d_1h_ago >= {{ .minBaselineSamples }}
      for: {{ .for }}
      labels:
        {{- include "rag-monitor.rules.labels" (dict "severity" .severity "extra" $extra) | nindent 8 }}
      annotations:
        summary: 'Tier-0 support of agent {{`{{ $labels.agent }}`}} dropped by {{`{{ $value | printf "%.2f" }}`}} against its 7-day baseline'
        description: 'The mean tier-0 support (heuristic evaluator, every trace) of agent {{`{{ $labels.agent }}`}} over the last hour is {{`{{ $value | printf "%.3f" }}`}} below its mean over the 7 days before, more than {{ .minDrop }} and more than {{ .sigmas }} times how much its hourly mean normally moves, from at least {{ .minSamples }} scores in the hour. Answers are less grounded in their contexts than usual: a deploy, a retrieval change or new traffic.'
        runbook_url: {{ printf "%s/RagmonTier0SupportDrop.md" $base }}
        {{- with $review }}
        review_url: '{{ . }}/review?agent={{`{{ $labels.agent }}`}}&metric=support&since=1h'
        {{- end }}
{{- end }}
{{- end }}
- name: ragmon-alerts-conversations
  rules:
{{- $conv := list
  (list "hallucination" "RagmonHallucinationRate" "agent:ragmon_turn_hallucination_ratio" "hallucination rate H_u" "agent, evaluator")
  (list "drift" "RagmonConstraintDrift" "agent:ragmon_turn_drift_ratio" "constraint drift D_r" "agent") }}
{{- range $v := $conv }}
{{- $c := index $a (index $v 0) }}
{{- if $c.enabled }}
{{- $name := index $v 1 }}
{{- $series := index $v 2 }}
{{- $what := index $v 3 }}
{{- $only := "" }}
{{- with $c.evaluators }}
{{- $only = printf "{evaluator=~%q}" . }}
{{- end }}
    - alert: {{ $name }}High
      expr: |-
        (
          {{ $series }}:mean1h{{ $only }} > {{ $c.threshold }}
          and
          {{ $series }}:mean6h{{ $only }} > {{ $c.threshold }}
        )
        and
        {{ $series }}_count:increase1h{{ $only }} >= {{ $c.minTurns }}
      for: {{ $c.for }}
      labels:
        {{- include "rag-monitor.rules.labels" (dict "severity" $c.severity "extra" $extra) | nindent 8 }}
      annotations:
        summary: 'Multi-turn {{ $what }} of agent {{`{{ $labels.agent }}`}} above {{ $c.threshold }}'
        description: 'The {{ $what }} of agent {{`{{ $labels.agent }}`}} is {{`{{ $value | printf "%.3f" }}`}} over the last hour and above {{ $c.threshold }} over 6 hours too, from at least {{ $c.minTurns }} turns in the hour.'
        runbook_url: {{ printf "%s/%sHigh.md" $base $name }}
        {{- with $review }}
        review_url: '{{ . }}/review?agent={{`{{ $labels.agent }}`}}&since=6h'
        {{- end }}
    - alert: {{ $name }}Rising
      expr: |-
        (
          {{ $series }}:mean6h{{ $only }} > {{ $series }}:mean1d_6h_ago{{ $only }} + {{ $c.riseBy }}
          and
          {{ $series }}:mean1h{{ $only }} > {{ $series }}:mean1d_6h_ago{{ $only }} + {{ $c.riseBy }}
        )
        and
        {{ $series }}_count:increase6h{{ $only }} >= {{ $c.minTurns }}
        and
        {{ $series }}_count:increase1d_6h_ago{{ $only }} >= {{ $c.minTurns }}
      for: {{ $c.for }}
      labels:
        {{- include "rag-monitor.rules.labels" (dict "severity" $c.severity "extra" $extra) | nindent 8 }}
      annotations:
        summary: 'Multi-turn {{ $what }} of agent {{`{{ $labels.agent }}`}} rising'
        description: 'The {{ $what }} of agent {{`{{ $labels.agent }}`}} is {{`{{ $value | printf "%.3f" }}`}} over the last 6 hours (and the last hour), more than {{ $c.riseBy }} above its mean over the day before, with at least {{ $c.minTurns }} turns in each window.'
        runbook_url: {{ printf "%s/%sRising.md" $base $name }}
        {{- with $review }}
        review_url: '{{ . }}/review?agent={{`{{ $labels.agent }}`}}&since=6h'
        {{- end }}
{{- end }}
{{- end }}
{{- with $a.golden }}
{{- if .enabled }}
{{- $modes := printf "mode=~%q" .modes }}
- name: ragmon-alerts-golden
  rules:
    - alert: RagmonGoldenBelowTarget
      expr: |-
        (
          min by (suite, mode, metric) (ragmon_golden_metric_ratio{ {{- $modes -}} })
          < on (suite, metric) group_left ()
          max by (suite, metric) (ragmon_golden_target_ratio)
        )
{{- range $metric, $target := .targets }}
        or
        (
          min by (suite, mode, metric) (ragmon_golden_metric_ratio{ {{- $modes }}, metric="{{ $metric }}"}) < {{ $target }}
          unless on (suite, metric)
          ragmon_golden_target_ratio
        )
{{- end }}
      labels:
        {{- include "rag-monitor.rules.labels" (dict "severity" .severity "extra" $extra) | nindent 8 }}
      annotations:
        summary: 'Golden suite {{`{{ $labels.suite }}`}} misses its {{`{{ $labels.metric }}`}} target (mode {{`{{ $labels.mode }}`}})'
        description: 'The last run of golden suite {{`{{ $labels.suite }}`}} in mode {{`{{ $labels.mode }}`}} measured {{`{{ $labels.metric }}`}} = {{`{{ $value | printf "%.3f" }}`}}, below the suite target (or, where the suite exports none, the chart default).'
        runbook_url: {{ printf "%s/RagmonGoldenBelowTarget.md" $base }}
    - alert: RagmonGoldenLatencyHigh
      expr: |-
{{- $latency := .latencyTargets }}
{{- range $i, $metric := keys $latency | sortAlpha }}
        {{- if $i }}
        or
        {{- end }}
        max by (suite, mode, metric) (ragmon_golden_latency_seconds{ {{- $modes }}, metric="{{ $metric }}"}) > {{ index $latency $metric }}
{{- end }}
      labels:
        {{- include "rag-monitor.rules.labels" (dict "severity" .severity "extra" $extra) | nindent 8 }}
      annotations:
        summary: 'Golden suite {{`{{ $labels.suite }}`}} {{`{{ $labels.metric }}`}} latency above target (mode {{`{{ $labels.mode }}`}})'
        description: 'The last run of golden suite {{`{{ $labels.suite }}`}} in mode {{`{{ $labels.mode }}`}} had {{`{{ $labels.metric }}`}} latency {{`{{ $value | humanizeDuration }}`}}, above its target.'
        runbook_url: {{ printf "%s/RagmonGoldenLatencyHigh.md" $base }}
    - alert: RagmonGoldenStale
      expr: |-
        (time() - max by (suite) (ragmon_golden_last_success_timestamp_seconds)) > {{ .maxAgeSeconds }}
        or
        (
          sum by (suite) (increase(ragmon_golden_runs_total{outcome="error"}[{{ .maxAgeSeconds }}s])) > 0
          unless on (suite)
          max by (suite) (ragmon_golden_last_success_timestamp_seconds)
        )
      for: 10m
      labels:
        {{- include "rag-monitor.rules.labels" (dict "severity" .severity "extra" $extra) | nindent 8 }}
      annotations:
        summary: 'Golden suite {{`{{ $labels.suite }}`}} has not completed a run for too long'
        description: 'Golden suite {{`{{ $labels.suite }}`}} has completed no run for more than {{ .maxAgeSeconds }} s (or has only errored since the daemon started); its metrics on the dashboards are stale.'
        runbook_url: {{ printf "%s/RagmonGoldenStale.md" $base }}
{{- end }}
{{- end }}
{{- with $a.judge }}
{{- if .enabled }}
- name: ragmon-alerts-judge
  rules:
    - alert: RagmonJudgeErrorRateHigh
      expr: |-
        evaluator:ragmon_judge_requests:error_ratio10m > {{ .errorRatio }}
        and
        evaluator:ragmon_judge_requests:increase10m >= {{ .minRequests }}
      for: {{ .for }}
      labels:
        {{- include "rag-monitor.rules.labels" (dict "severity" .severity "extra" $extra) | nindent 8 }}
      annotations:
        summary: 'LLM judge {{`{{ $labels.evaluator }}`}} failing on {{`{{ $value | humanizePercentage }}`}} of calls'
        description: '{{`{{ $value | humanizePercentage }}`}} of the chat calls of evaluator {{`{{ $labels.evaluator }}`}} over 10 minutes failed (error, timeout, rate limited or malformed), above {{ .errorRatio }}, with at least {{ .minRequests }} calls. Judged scores go unmeasured meanwhile; tier 0 continues.'
        runbook_url: {{ printf "%s/RagmonJudgeErrorRateHigh.md" $base }}
    - alert: RagmonJudgeCircuitOpen
      expr: |-
        max by (evaluator) (ragmon_judge_circuit_open) > 0
      for: {{ .circuitOpenFor }}
      labels:
        {{- include "rag-monitor.rules.labels" (dict "severity" .severity "extra" $extra) | nindent 8 }}
      annotations:
        summary: 'LLM judge circuit open for {{`{{ $labels.evaluator }}`}}'
        description: 'The circuit breaker of evaluator {{`{{ $labels.evaluator }}`}} has been open for {{ .circuitOpenFor }} on at least one replica: no judge calls are made and judged traces are shed (circuit_open).'
        runbook_url: {{ printf "%s/RagmonJudgeCircuitOpen.md" $base }}
    - alert: RagmonJudgeSheddingHigh
      expr: |-
        (
          sum (rate(ragmon_sampler_shed_total{reason!="circuit_open"}[30m]))
          /
          sum (rate(ragmon_sampler_decisions_total{outcome=~"sampled|priority|shed"}[30m]))
        ) > {{ .shedRatio }}
        and on ()
        sum (increase(ragmon_sampler_decisions_total{outcome=~"sampled|priority|shed"}[30m])) >= {{ .minSelected }}
      for: {{ .shedFor }}
      labels:
        {{- include "rag-monitor.rules.labels" (dict "severity" .severity "extra" $extra) | nindent 8 }}
      annotations:
        summary: 'The LLM judge is skipping {{`{{ $value | humanizePercentage }}`}} of the traces selected for it'
        description: 'Over 30 minutes {{`{{ $value | humanizePercentage }}`}} of the traces the sampler selected for the judge (sampled or priority) were shed for load -- queue full, token budget, or the rate lowered under load (circuit_open is left to RagmonJudgeCircuitOpen) -- above {{ .shedRatio }}, with at least {{ .minSelected }} selected. Judged scores on the dashboards rest on a fraction of the intended sample.'
        runbook_url: {{ printf "%s/RagmonJudgeSheddingHigh.md" $base }}
{{- end }}
{{- end }}
- name: ragmon-alerts-pipeline
  rules:
{{- with $a.deadLetters }}
{{- if .enabled }}
    - alert: RagmonDeadLetters
      expr: |-
        (
          sum by (reason) (rate(ragmon_dead_letters_total[15m]))
          / on () group_left ()
          sum (rate(ragmon_messages_consumed_total[15m]))
        ) > {{ .ratio }}
        and
        sum by (reason) (increase(ragmon_dead_letters_total[15m])) >= {{ .minCount }}
      for: {{ .for }}
      labels:
        {{- include "rag-monitor.rules.labels" (dict "severity" .severity "extra" $extra) | nindent 8 }}
      annotations:
        summary: 'Input messages dead-lettered ({{`{{ $labels.reason }}`}})'
        description: '{{`{{ $value | humanizePercentage }}`}} of the consumed messages over 15 minutes went to the dead-letter topic with reason {{`{{ $labels.reason }}`}} (threshold {{ .ratio }}, at least {{ .minCount }} messages).'
        runbook_url: {{ printf "%s/RagmonDeadLetters.md" $base }}
{{- end }}
{{- end }}
{{- with $a.consumerLag }}
{{- if .enabled }}
    - alert: RagmonConsumerLagGrowing
      expr: |-
        topic:ragmon_kafka_consumer_lag_messages:sum > {{ .minMessages }}
        and
        deriv(topic:ragmon_kafka_consumer_lag_messages:sum[15m]) > 0
      for: {{ .for }}
      labels:
        {{- include "rag-monitor.rules.labels" (dict "severity" .severity "extra" $extra) | nindent 8 }}
      annotations:
        summary: 'Consumer lag on {{`{{ $labels.topic }}`}} is growing'
        description: 'The consumer group is {{`{{ $value | printf "%.0f" }}`}} messages behind on topic {{`{{ $labels.topic }}`}} (above {{ .minMessages }}) and the lag has kept growing for {{ .for }}.'
        runbook_url: {{ printf "%s/RagmonConsumerLagGrowing.md" $base }}
{{- end }}
{{- end }}
{{- with $a.noEvaluations }}
{{- if .enabled }}
    - alert: RagmonNoEvaluations
      expr: |-
        sum (increase(ragmon_traces_processed_total[15m])) >= {{ .minTraces }}
        unless on ()
        sum (increase(ragmon_evaluations_total[15m])) > 0
      for: {{ .for }}
      labels:
        {{- include "rag-monitor.rules.labels" (dict "severity" .severity "extra" $extra) | nindent 8 }}
      annotations:
        summary: 'Traces flow but nothing is evaluated'
        description: '{{`{{ $value | printf "%.0f" }}`}} traces were processed in 15 minutes and not one evaluation ran, not even the heuristic tier: answer quality is unmonitored.'
        runbook_url: {{ printf "%s/RagmonNoEvaluations.md" $base }}
{{- end }}
{{- end }}
{{- with $a.otlpAssembly }}
{{- if .enabled }}
    - alert: RagmonOtlpAssemblyShedding
      expr: |-
        (
          sum by (reason) (rate(ragmon_otlp_assembly_shed_total[30m]))
          / on () group_left ()
          sum (rate(ragmon_otlp_traces_released_total{outcome=~"complete|incomplete"}[30m]))
        ) > {{ .shedRatio }}
        and
        sum by (reason) (increase(ragmon_otlp_assembly_shed_total[30m])) >= {{ .minShed }}
        and
        sum by (reason) (increase(ragmon_otlp_assembly_shed_total[5m])) > 0
      for: {{ .for }}
      labels:
        {{- include "rag-monitor.rules.labels" (dict "severity" .severity "extra" $extra) | nindent 8 }}
      annotations:
        summary: 'The OTLP assembler is shedding traces ({{`{{ $labels.reason }}`}})'
        description: 'Over 30 minutes the OTLP stage shed traces at its memory bound (kafka.otlp_max_pending_traces, otlp_max_kept_traces or otlp_max_pending_bytes) with reason {{`{{ $labels.reason }}`}} at {{`{{ $value | humanizePercentage }}`}} of the rate it released traces (threshold {{ .shedRatio }}, at least {{ .minShed }} shed), and it kept shedding for {{ .for }}. pending_limit: traces released before they were whole, scored with the incomplete_trace flag; grace_limit: traces forgotten before their late spans could arrive.'
        runbook_url: {{ printf "%s/RagmonOtlpAssemblyShedding.md" $base }}
{{- end }}
{{- end }}
{{- with $a.stageStuck }}
{{- if .enabled }}
    - alert: RagmonStageStuck
      expr: |-
        ragmon_stuck_partitions > 0
      for: {{ .for }}
      labels:
        {{- include "rag-monitor.rules.labels" (dict "severity" .severity "extra" $extra) | nindent 8 }}
      annotations:
        summary: 'The {{`{{ $labels.stage }}`}} stage of {{`{{ $labels.instance }}`}} is stuck with work'
        description: 'On {{`{{ $value | printf "%.0f" }}`}} partitions of the {{`{{ $labels.stage }}`}} stage the oldest unfinished message has not finished for kafka.stuck_seconds (5 minutes by default) and {{ .for }} more: no offset after it is committed (a restart reads all of it again), and while a write keeps failing nothing more is scored there. The replica''s /readyz names the partitions and the write that keeps failing, if one does.'
        runbook_url: {{ printf "%s/RagmonStageStuck.md" $base }}
{{- end }}
{{- end }}
{{- with $a.daemonDown }}
{{- if .enabled }}
- name: ragmon-alerts-availability
  rules:
    - alert: RagmonDaemonDown
      expr: |-
        up{ {{- .selector -}} } == 0
      for: {{ .for }}
      labels:
        {{- include "rag-monitor.rules.labels" (dict "severity" .severity "extra" $extra) | nindent 8 }}
      annotations:
        summary: 'rag-monitor target {{`{{ $labels.instance }}`}} is down'
        description: 'Prometheus has failed to scrape rag-monitor at {{`{{ $labels.instance }}`}} for {{ .for }}: that replica is not running, not listening or not reachable.'
        runbook_url: {{ printf "%s/RagmonDaemonDown.md" $base }}
    - alert: RagmonDaemonAbsent
      expr: |-
        absent(up{ {{- .selector -}} })
      for: {{ .absentFor }}
      labels:
        {{- include "rag-monitor.rules.labels" (dict "severity" .severity "extra" $extra) | nindent 8 }}
      annotations:
        summary: 'No rag-monitor target is scraped'
        description: 'Prometheus has found no rag-monitor scrape target ({{ .selector }}) for {{ .absentFor }}: the deployment is gone, scaled to zero, or its ServiceMonitor no longer matches.'
        runbook_url: {{ printf "%s/RagmonDaemonAbsent.md" $base }}
{{- end }}
{{- end }}
{{- end }}
