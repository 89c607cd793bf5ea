{{/*
The effective values, in upstream's order (last wins):
  chart defaults < `profile` (or `global.profile`) < `compatibilityVersion` < `platform` (or
  `global.platform`) < what the user set, where the user's legacy `cni.`-prefixed values win over
  the same un-prefixed ones (upstream copies `.cni` over `.`).
A profile file holds upstream's shape: chart values at the top level and/or under `cni:`.
Every template starts with
  {{- $v := include "istio-cni.values" . | fromYaml }}
and reads only $v, so profiles apply the same way everywhere whatever order Helm renders in.
A user value this chart does not act on fails the render, naming it (see "istio-cni.checkKeys").
*/}}
{{- define "istio-cni.values" -}}
{{- $defaults := deepCopy (index .Values "_internal_defaults_do_not_set" | default dict) -}}
{{- $given := deepCopy (omit .Values "_internal_defaults_do_not_set") -}}
{{- $legacy := $given.cni | default dict -}}
{{- if not (kindIs "map" $legacy) }}{{ fail (printf "cni must be a map of chart values, got %v" $legacy) }}{{ end -}}
{{- include "istio-cni.checkKeys" (dict "values" (omit $given "cni") "defaults" $defaults "prefix" "") -}}
{{- include "istio-cni.checkKeys" (dict "values" (omit $legacy "global") "defaults" $defaults "prefix" "cni.") -}}
{{- with $legacy.global }}{{ fail "cni.global is not read: set global.* at the top level" }}{{ end -}}
{{- $user := mustMergeOverwrite (omit $given "cni") $legacy -}}
{{- $userGlobal := $user.global | default dict -}}
{{- $profile := dict -}}
{{- with coalesce $user.profile $userGlobal.profile -}}
{{- $file := $.Files.Get (printf "files/profile-%s.yaml" .) -}}
{{- if not $file }}{{ fail (printf "unknown profile %q (profiles: %s)" . (include "istio-cni.fileNames" (dict "root" $ "glob" "files/profile-*.yaml" "trim" "profile-" "skip" (list "platform-" "compatibility-version-")))) }}{{ end -}}
{{- $profile = mustMergeOverwrite $profile (include "istio-cni.profileValues" ($file | fromYaml) | fromYaml) -}}
{{- end -}}
{{- with $user.compatibilityVersion -}}
{{- $version := kindIs "float64" . | ternary (printf "%.2f" .) (toString .) -}}
{{- $file := $.Files.Get (printf "files/profile-compatibility-version-%s.yaml" $version) -}}
{{- if not $file }}{{ fail (printf "unknown compatibilityVersion %q (versions: %s)" $version (include "istio-cni.fileNames" (dict "root" $ "glob" "files/profile-compatibility-version-*.yaml" "trim" "profile-compatibility-version-" "skip" list))) }}{{ end -}}
{{- $profile = mustMergeOverwrite $profile (include "istio-cni.profileValues" ($file | fromYaml) | fromYaml) -}}
{{- end -}}
{{- $platform := coalesce $user.platform $userGlobal.platform -}}
{{- with $platform -}}
{{- $file := $.Files.Get (printf "files/profile-platform-%s.yaml" .) -}}
{{- if not $file }}{{ fail (printf "unknown platform %q (platforms: %s)" . (include "istio-cni.fileNames" (dict "root" $ "glob" "files/profile-platform-*.yaml" "trim" "profile-platform-" "skip" list))) }}{{ end -}}
{{- $profile = mustMergeOverwrite $profile (include "istio-cni.profileValues" ($file | fromYaml) | fromYaml) -}}
{{- end -}}
{{- $merged := mustMergeOverwrite (mustMergeOverwrite $defaults $profile) $user -}}
{{- /* The platform the templates act on (OpenShift RBAC, GKE bin dir): upstream's coalesce. */ -}}
{{- $_ := set $merged "platform" (coalesce $merged.platform $merged.global.platform | default "") -}}
{{- toYaml $merged -}}
{{- end -}}

{{/* A profile file in upstream's shape: top-level chart values, then its `cni:` section over them. */}}
{{- define "istio-cni.profileValues" -}}
{{- $out := deepCopy (omit . "cni") -}}
{{- $out = mustMergeOverwrite $out (deepCopy (.cni | default dict)) -}}
{{- toYaml $out -}}
{{- end -}}

{{/* Comma-separated names of the chart files matching a glob, for error messages. */}}
{{- define "istio-cni.fileNames" -}}
{{- $names := list -}}
{{- range $path, $_ := .root.Files.Glob .glob -}}
{{- $name := base $path | trimSuffix ".yaml" | trimPrefix $.trim -}}
{{- $skip := false -}}
{{- range $.skip }}{{ if hasPrefix . $name }}{{ $skip = true }}{{ end }}{{ end -}}
{{- if not $skip }}{{ $names = append $names $name }}{{ end -}}
{{- end -}}
{{- join ", " $names -}}
{{- end -}}

{{/*
Fails on a user value this chart would not act on: a key absent from the chart's defaults (a
typo, or an upstream value this product does not implement, such as `privileged` or
`ambient.redirectMode`), unless it is left empty. `global` is shared by every Istio chart, so its
other keys are left alone; free-form maps (env, labels, annotations, affinity, resources, ...) are
taken as given.
*/}}
{{- define "istio-cni.checkKeys" -}}
{{- $structured := list "ambient" "repair" "logging" "resourceQuotas" "taint" "verify" "installBinariesInitContainer" -}}
{{- range $key, $val := .values -}}
{{- $path := printf "%s%s" $.prefix $key -}}
{{- if and (not (hasKey $.defaults $key)) (not (empty $val)) -}}
{{- fail (printf "value %s=%v is not used by this chart: remove it, or see the chart README for the values it reads" $path $val) -}}
{{- end -}}
{{- if and (has $key $structured) (kindIs "map" $val) (kindIs "map" (index $.defaults $key)) -}}
{{- include "istio-cni.checkKeys" (dict "values" $val "defaults" (index $.defaults $key) "prefix" (printf "%s." $path)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Labels on every object, as upstream puts them: `kubectl -l` selectors and dashboards written for
upstream's chart find these objects. Called with (dict "root" $ "v" $v).
*/}}
{{- define "istio-cni.labels" -}}
app: istio-cni
release: {{ .root.Release.Name }}
istio.io/rev: {{ .v.revision | default "default" }}
install.operator.istio.io/owning-resource: {{ .v.ownerName | default "unknown" }}
operator.istio.io/component: Cni
app.kubernetes.io/name: istio-cni
{{ include "istio-cni.commonLabels" .root }}
{{- end -}}

{{/* The app.kubernetes.io/* and helm.sh/chart labels (also on the DaemonSet's pods). */}}
{{- define "istio-cni.commonLabels" -}}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: istio
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Whether cluster-scoped (ClusterRoles, bindings) and namespaced objects are rendered. */}}
{{- define "istio-cni.clusterScoped" -}}
{{- if has .global.resourceScope (list "all" "cluster") }}true{{ end -}}
{{- end -}}
{{- define "istio-cni.namespaced" -}}
{{- if has .global.resourceScope (list "all" "namespace") }}true{{ end -}}
{{- end -}}

{{/* The node image: hub/image:tag[-variant]; an image containing "/" is used as given. */}}
{{- define "istio-cni.image" -}}
{{- $hub := .hub | default .global.hub -}}
{{- $tag := .tag | default .global.tag | default .appVersion -}}
{{- $variant := .variant | default .global.variant -}}
{{- if contains "/" .image -}}
{{ .image }}
{{- else -}}
{{ $hub }}/{{ .image }}:{{ $tag }}{{ with $variant }}-{{ . }}{{ end }}
{{- end -}}
{{- end -}}

{{/*
The daemon's V8 heap limit in MiB from the container's memory limit (what GOMEMLIMIT is to
upstream's Go agent): three quarters of it, leaving the rest to the runtime's code, buffers and
native memory. Empty without a limit (V8 then sizes the heap from the cgroup's memory).
Quantities: plain bytes, decimal (k M G T P E) and binary (Ki Mi Gi Ti Pi Ei) suffixes, decimals.
*/}}
{{- define "istio-cni.heapLimitMiB" -}}
{{- $limit := toString (((.resources | default dict).limits | default dict).memory | default "") -}}
{{- if $limit -}}
{{- $m := regexFindAll "^([0-9]+(?:\\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$" $limit 1 -}}
{{- if not $m }}{{ fail (printf "resources.limits.memory %q is not a memory quantity this chart can read (e.g. 256Mi, 1Gi, 300M)" $limit) }}{{ end -}}
{{- $number := regexReplaceAll "[^0-9.]" $limit "" | float64 -}}
{{- $suffix := regexReplaceAll "^[0-9.]+" $limit "" -}}
{{- $factors := dict "" 1.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 "P" 1000000000000000.0 "E" 1000000000000000000.0 -}}
{{- $mib := divf (mulf $number (index $factors $suffix)) 1048576.0 -}}
{{- $heap := floor (mulf $mib 0.75) | int -}}
{{- if lt $heap 16 }}{{ fail (printf "resources.limits.memory %q leaves the daemon a heap under 16 MiB" $limit) }}{{ end -}}
{{- $heap -}}
{{- end -}}
{{- end -}}
