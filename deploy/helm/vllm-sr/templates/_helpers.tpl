{{/* Names, labels and images shared by the templates. */}}

{{- define "vllm-sr.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "vllm-sr.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "vllm-sr.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "vllm-sr.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* labels: pass (dict "root" $ "component" "envoy") */}}
{{- define "vllm-sr.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{ include "vllm-sr.selectorLabels" . }}
{{- end -}}

{{- define "vllm-sr.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vllm-sr.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "vllm-sr.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "vllm-sr.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* An image reference: repository:tag, and @digest when given (the digest is what is pulled;
     the tag stays for people reading the manifest). A repository that already carries
     @sha256: is used as it is. */}}
{{- define "vllm-sr.image" -}}
{{- if contains "@sha256:" .repository -}}
{{- .repository -}}
{{- else if and .digest .tag -}}
{{- printf "%s:%s@%s" .repository .tag .digest -}}
{{- else if .digest -}}
{{- printf "%s@%s" .repository .digest -}}
{{- else -}}
{{- printf "%s:%s" .repository .tag -}}
{{- end -}}
{{- end -}}

{{/* Pod and container security contexts (Pod Security "restricted"; docs/deploy/security.md). */}}
{{- define "vllm-sr.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext -}}
{{- end -}}

{{- define "vllm-sr.containerSecurityContext" -}}
{{- toYaml .Values.containerSecurityContext -}}
{{- end -}}

{{/* A PodDisruptionBudget only when it can be met: more pods than minAvailable keeps one
     voluntary eviction possible (else node drains block). Pass (dict "pdb" P "replicas" N). */}}
{{- define "vllm-sr.pdbFits" -}}
{{- $min := .pdb.minAvailable -}}
{{- if and .pdb.enabled (kindIs "string" $min) (hasSuffix "%" $min) -}}
{{- if gt (int .replicas) 1 -}}true{{- end -}}
{{- else if and .pdb.enabled (gt (int .replicas) (int $min)) -}}true
{{- end -}}
{{- end -}}

{{- define "vllm-sr.controlPlaneService" -}}
{{- printf "%s-control-plane" (include "vllm-sr.fullname" .) -}}
{{- end -}}

{{/* ADS over mTLS: the Secrets' names (given, or the cert-manager Certificates' defaults). JSON
     {"server": ..., "client": ...}, or "" when TLS is off. */}}
{{- define "vllm-sr.xdsTls" -}}
{{- $t := .Values.controlPlane.tls -}}
{{- if $t.enabled -}}
{{- $fullname := include "vllm-sr.fullname" . -}}
{{- toJson (dict "server" ($t.secretName | default (printf "%s-xds-server" $fullname)) "client" ($t.clientSecretName | default (printf "%s-xds-client" $fullname))) -}}
{{- end -}}
{{- end -}}

{{/* Where the Envoy pods and the control plane mount those Secrets. */}}
{{- define "vllm-sr.tlsDir" -}}/etc/vllm-sr-tls{{- end -}}

{{/* Where Envoy and the sidecars reach the control plane's ADS port. */}}
{{- define "vllm-sr.xdsAddress" -}}
{{- if .Values.envoy.xdsAddress -}}
{{- .Values.envoy.xdsAddress -}}
{{- else -}}
{{- printf "%s.%s.svc:%d" (include "vllm-sr.controlPlaneService" .) .Release.Namespace (int .Values.controlPlane.adsPort) -}}
{{- end -}}
{{- end -}}

{{/* The global flags every vllm-sr process takes. */}}
{{- define "vllm-sr.logFlags" -}}
- --log-format
- {{ .Values.logFormat | quote }}
- --log-level
- {{ .Values.logLevel | quote }}
{{- end -}}

{{/* An HTTP GET on loopback, as an exec probe: the sidecar's status port and Envoy's admin stay off the pod IP. */}}
{{- define "vllm-sr.loopbackProbe" -}}
exec:
  command:
    - python3
    - -c
    - {{ printf "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:%d%s', timeout=2).status == 200 else 1)" (int .port) .path | quote }}
{{- end -}}

{{/* A deep merge in which every key `over` gives wins, false and 0 included (sprig's merge
     would let a default true replace a given false). Returns JSON. */}}
{{- define "vllm-sr.merge" -}}
{{- $out := dict -}}
{{- range $k, $v := .base -}}{{- $_ := set $out $k $v -}}{{- end -}}
{{- range $k, $v := .over -}}
{{- $b := index $.base $k -}}
{{- if and (kindIs "map" $v) (kindIs "map" $b) -}}
{{- $_ := set $out $k (fromJson (include "vllm-sr.merge" (dict "base" $b "over" $v))) -}}
{{- else -}}
{{- $_ := set $out $k $v -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The enabled runtime groups, each with runtimeDefaults filled in: JSON, name -> group. */}}
{{- define "vllm-sr.runtimes" -}}
{{- $out := dict -}}
{{- range $name, $group := (.Values.runtimes | default dict) -}}
{{- $g := fromJson (include "vllm-sr.merge" (dict "base" $.Values.runtimeDefaults "over" ($group | default dict))) -}}
{{- if $g.enabled -}}
{{- $_ := set $out $name $g -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The sidecar's variables from Secrets: sidecar.secretEnv plus, for each deployment naming a
     keyed runtime group's Service, the group's key under the deployment's api_key_env. JSON. */}}
{{- define "vllm-sr.sidecarSecretEnv" -}}
{{- $out := dict -}}
{{- range $env, $ref := (.Values.sidecar.secretEnv | default dict) -}}
{{- $_ := set $out $env $ref -}}
{{- end -}}
{{- $runtimes := fromJson (include "vllm-sr.runtimes" .) -}}
{{- $config := fromJson (include "vllm-sr.config" .) -}}
{{- range $name, $dep := ($config.deployments | default dict) -}}
{{- if and $dep.service $dep.api_key_env -}}
{{- $group := index $runtimes $dep.service.name -}}
{{- if and $group (not $dep.service.namespace) $group.apiKey.secretName -}}
{{- $ref := dict "secretName" $group.apiKey.secretName "key" $group.apiKey.key -}}
{{- $given := index $out $dep.api_key_env -}}
{{- if and $given (ne (toJson $given) (toJson $ref)) -}}
{{- fail (printf "config.deployments.%s.api_key_env %s: the sidecar would get two keys under that name (runtime group %s's apiKey and another); give each its own variable" $name $dep.api_key_env $dep.service.name) -}}
{{- end -}}
{{- $_ := set $out $dep.api_key_env $ref -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The router config served: config, or files/default-config.yaml when it is empty. JSON. */}}
{{- define "vllm-sr.config" -}}
{{- if .Values.config -}}
{{- toJson .Values.config -}}
{{- else -}}
{{- .Files.Get "files/default-config.yaml" | fromYaml | toJson -}}
{{- end -}}
{{- end -}}
