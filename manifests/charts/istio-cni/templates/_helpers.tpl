{{/*
The effective values: chart defaults, then the `profile` file, then the `global.platform` file, then
what the user set. Every template starts with
  {{- $v := include "istio-cni.values" . | fromYaml }}
and reads only $v, so profiles apply the same way everywhere whatever order Helm renders in.
*/}}
{{- define "istio-cni.values" -}}
{{- $defaults := deepCopy (index .Values "_internal_defaults_do_not_set" | default dict) -}}
{{- $user := deepCopy (omit .Values "_internal_defaults_do_not_set") -}}
{{- $merged := $defaults -}}
{{- $profileName := $user.profile | default $defaults.profile -}}
{{- if $profileName -}}
{{- $file := .Files.Get (printf "files/profile-%s.yaml" $profileName) -}}
{{- if not $file -}}{{- fail (printf "unknown profile %q: no files/profile-%s.yaml" $profileName $profileName) -}}{{- end -}}
{{- $merged = mustMergeOverwrite $merged (include "istio-cni.profileValues" ($file | fromYaml) | fromYaml) -}}
{{- end -}}
{{- $platform := (($user.global | default dict).platform) | default $merged.global.platform -}}
{{- if $platform -}}
{{- $file := .Files.Get (printf "files/profile-platform-%s.yaml" $platform) -}}
{{- if not $file -}}{{- fail (printf "unknown global.platform %q: no files/profile-platform-%s.yaml" $platform $platform) -}}{{- end -}}
{{- $merged = mustMergeOverwrite $merged (include "istio-cni.profileValues" ($file | fromYaml) | fromYaml) -}}
{{- end -}}
{{- $merged = mustMergeOverwrite $merged $user -}}
{{- toYaml $merged -}}
{{- end -}}

{{/* A profile file holds `cni:` (chart values) and `global:`; this flattens it into chart values. */}}
{{- define "istio-cni.profileValues" -}}
{{- $out := deepCopy (.cni | default dict) -}}
{{- if .global -}}{{- $_ := set $out "global" (deepCopy .global) -}}{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{- define "istio-cni.labels" -}}
app.kubernetes.io/name: istio-cni
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: istio
app.kubernetes.io/managed-by: {{ .Release.Service }}
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
