{{/* What the values schema cannot see: how the router config and the chart's other values fit
     together. Each failure names the value to change. Rendered once, from config.yaml. */}}
{{- define "vllm-sr.checks" -}}
{{- $runtimes := fromJson (include "vllm-sr.runtimes" .) -}}
{{- $secretEnv := fromJson (include "vllm-sr.sidecarSecretEnv" .) -}}
{{- $config := fromJson (include "vllm-sr.config" .) -}}

{{- /* A deployment served by a runtime group must call it as the group serves. */ -}}
{{- range $name, $dep := ($config.deployments | default dict) -}}
{{- if and $dep.service (or (not $dep.service.namespace) (eq $dep.service.namespace $.Release.Namespace)) -}}
{{- $group := index $runtimes $dep.service.name -}}
{{- if $group -}}
{{- $where := printf "config.deployments.%s" $name -}}
{{- if ne (int $dep.service.port) (int $group.port) -}}
{{- fail (printf "%s.service.port is %v, but runtime group %s listens on %v (runtimes.%s.port)" $where $dep.service.port $dep.service.name $group.port $dep.service.name) -}}
{{- end -}}
{{- if ne $dep.model (base $group.model) -}}
{{- fail (printf "%s.model is %q, but runtime group %s serves %q (the name vllm-srun answers to: the built-in's, or the checkpoint folder's last part)" $where $dep.model $dep.service.name (base $group.model)) -}}
{{- end -}}
{{- $schema := $dep.schema | default "systemone/0.2" -}}
{{- if and (has $group.schema (list "vllm-sr/5.0" "systemone/0.2")) (ne $schema $group.schema) -}}
{{- fail (printf "%s.schema is %s%s, but runtime group %s speaks %s (runtimes.%s.schema)" $where $schema (ternary " (the default)" "" (not $dep.schema)) $dep.service.name $group.schema $dep.service.name) -}}
{{- end -}}
{{- if and $group.apiKey.secretName (not $dep.api_key_env) -}}
{{- fail (printf "%s: runtime group %s requires a key (runtimes.%s.apiKey); give the deployment api_key_env, the variable the sidecar reads it from" $where $dep.service.name $dep.service.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* ADS over mTLS names its certificates, or has cert-manager make them. */ -}}
{{- $tls := .Values.controlPlane.tls -}}
{{- if and $tls.enabled (not $tls.certManager.enabled) (or (not $tls.secretName) (not $tls.clientSecretName)) -}}
{{- fail "controlPlane.tls.enabled: give controlPlane.tls.secretName (the control plane's certificate) and controlPlane.tls.clientSecretName (the Envoy pods'), Secrets with tls.crt, tls.key and ca.crt; or controlPlane.tls.certManager.enabled with its issuerRef" -}}
{{- end -}}
{{- if and $tls.enabled $tls.certManager.enabled (not $tls.certManager.issuerRef.name) -}}
{{- fail "controlPlane.tls.certManager.enabled: give controlPlane.tls.certManager.issuerRef.name, a cert-manager Issuer (or ClusterIssuer) that signs both certificates" -}}
{{- end -}}

{{- /* Every key the config names by variable is given to the sidecar. */ -}}
{{- $needs := list -}}
{{- range $name, $dep := ($config.deployments | default dict) -}}
{{- if $dep.api_key_env -}}{{- $needs = append $needs (list (printf "config.deployments.%s.api_key_env" $name) $dep.api_key_env) -}}{{- end -}}
{{- end -}}
{{- range $i, $model := (($config.providers | default dict).models | default list) -}}
{{- if $model.api_key_env -}}{{- $needs = append $needs (list (printf "config.providers.models[%d].api_key_env" $i) $model.api_key_env) -}}{{- end -}}
{{- end -}}
{{- range $i, $listener := ($config.listeners | default list) -}}
{{- if and $listener.auth $listener.auth.keys_env -}}{{- $needs = append $needs (list (printf "config.listeners[%d].auth.keys_env" $i) $listener.auth.keys_env) -}}{{- end -}}
{{- end -}}
{{- range $need := $needs -}}
{{- if not (hasKey $secretEnv (index $need 1)) -}}
{{- fail (printf "%s names %s, which the sidecar does not have: add sidecar.secretEnv.%s: {secretName: <an existing Secret>, key: <its key>}" (index $need 0) (index $need 1) (index $need 1)) -}}
{{- end -}}
{{- end -}}

{{- /* A listener's keys file lies in a mounted Secret. */ -}}
{{- range $i, $listener := ($config.listeners | default list) -}}
{{- if and $listener.auth $listener.auth.keys_file -}}
{{- $found := false -}}
{{- range $mount := ($.Values.sidecar.secretFiles | default list) -}}
{{- if hasPrefix (printf "%s/" (trimSuffix "/" $mount.mountPath)) $listener.auth.keys_file -}}{{- $found = true -}}{{- end -}}
{{- end -}}
{{- if not $found -}}
{{- fail (printf "config.listeners[%d].auth.keys_file %s is in no mounted Secret: add sidecar.secretFiles: [{secretName: <an existing Secret>, mountPath: %s}]" $i $listener.auth.keys_file (dir $listener.auth.keys_file)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* Each runtime group's weights come from somewhere it names. */ -}}
{{- range $name, $g := $runtimes -}}
{{- $w := $g.weights -}}
{{- if lt (int $g.terminationGracePeriodSeconds) (add (int $g.preStopSeconds) 10) -}}
{{- fail (printf "runtimes.%s.terminationGracePeriodSeconds is %v, but the pod serves on for preStopSeconds (%v) before SIGTERM, and vllm-srun needs up to 5 s more to finish its requests: give at least %v" $name $g.terminationGracePeriodSeconds $g.preStopSeconds (add (int $g.preStopSeconds) 10)) -}}
{{- end -}}
{{- if gt (int $g.gpus) 1 -}}
{{- fail (printf "runtimes.%s.gpus is %v, but vllm-srun serves one model on one device, so a pod uses one GPU and the others would sit reserved and idle: give gpus: 1 and replicas: %v (one pod per GPU)" $name $g.gpus (mul (int $g.gpus) (int $g.replicas))) -}}
{{- end -}}
{{- if and (eq $w.source "pvc") (not $w.pvc.claimName) -}}
{{- fail (printf "runtimes.%s.weights.source is pvc: give runtimes.%s.weights.pvc.claimName" $name $name) -}}
{{- end -}}
{{- if and (eq $w.source "hostPath") (not $w.hostPath.path) -}}
{{- fail (printf "runtimes.%s.weights.source is hostPath: give runtimes.%s.weights.hostPath.path" $name $name) -}}
{{- end -}}
{{- if and (eq $w.source "initContainer") (not $w.initContainer.image) -}}
{{- fail (printf "runtimes.%s.weights.source is initContainer: give runtimes.%s.weights.initContainer.image" $name $name) -}}
{{- end -}}
{{- if and (hasPrefix "/" $g.model) (ne $w.source "none") (not (hasPrefix (printf "%s/" (trimSuffix "/" $w.mountPath)) $g.model)) -}}
{{- fail (printf "runtimes.%s.model %s is not under runtimes.%s.weights.mountPath (%s), where the weights are mounted" $name $g.model $name $w.mountPath) -}}
{{- end -}}
{{- end -}}
{{- end -}}
