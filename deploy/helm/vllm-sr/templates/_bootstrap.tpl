{{/* Envoy's bootstrap, as sr_control/compiler/build.py `bootstrap()` writes it (tests/deploy
     holds the two equal) plus the stats listener below: Envoy knows only the control plane and
     takes everything else over ADS. The admin API stays on loopback (/quitquitquit,
     /runtime_modify and /config_dump are for the pod's own preStop hooks, not the network).
     Pass (dict "root" $ "host" H "port" P "isIp" bool "tls" bool). */}}
{{- define "vllm-sr.bootstrap" -}}
{{- $v := .root.Values.envoy -}}
node: {id: {{ $v.nodeId | quote }}, cluster: vllm-sr}
admin:
  address:
    socket_address: {address: "127.0.0.1", port_value: {{ $v.adminPort }}}
layered_runtime:
  layers:
    - {name: static, static_layer: {}}
    - {name: admin, admin_layer: {}}
overload_manager:
  resource_monitors:
    - name: envoy.resource_monitors.global_downstream_max_connections
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig
        max_active_downstream_connections: 50000
dynamic_resources:
  ads_config:
    api_type: {{ ternary "DELTA_GRPC" "GRPC" (eq $v.ads "delta") }}
    transport_api_version: V3
    set_node_on_first_message_only: true
    grpc_services:
      - envoy_grpc: {cluster_name: vsr/xds, retry_policy: {retry_back_off: {base_interval: 0.1s, max_interval: 0.5s}}}
  lds_config: {ads: {}, resource_api_version: V3}
  cds_config: {ads: {}, resource_api_version: V3}
static_resources:
  {{- include "vllm-sr.statsListener" .root | nindent 2 }}
  clusters:
    {{- include "vllm-sr.adminCluster" .root | nindent 4 }}
    - name: vsr/xds
      type: {{ ternary "STATIC" "STRICT_DNS" .isIp }}
      {{- if not .isIp }}
      dns_lookup_family: V4_PREFERRED
      {{- end }}
      connect_timeout: 1s
      lb_policy: LEAST_REQUEST
      per_connection_buffer_limit_bytes: 34603008
      load_assignment:
        cluster_name: vsr/xds
        endpoints:
          - lb_endpoints:
              - endpoint:
                  address:
                    socket_address: {address: {{ .host | quote }}, port_value: {{ .port }}}
                  hostname: {{ .host | quote }}
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config:
            # The ADS stream idles between pushes; pings notice a control plane that vanished.
            http2_protocol_options:
              connection_keepalive: {interval: 30s, timeout: 5s}
      {{- if .tls }}
      # ADS over mTLS: Envoy presents the pod's certificate and checks the control plane's.
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
          common_tls_context:
            tls_certificates:
              - certificate_chain: {filename: {{ printf "%s/tls.crt" (include "vllm-sr.tlsDir" .root) }}}
                private_key: {filename: {{ printf "%s/tls.key" (include "vllm-sr.tlsDir" .root) }}}
            validation_context:
              trusted_ca: {filename: {{ printf "%s/ca.crt" (include "vllm-sr.tlsDir" .root) }}}
      {{- end }}
      circuit_breakers:
        thresholds:
          - {priority: DEFAULT, max_connections: 1024, max_pending_requests: 1024, max_requests: 1024, max_retries: 3}
{{- end -}}


{{/* The pod network's only way to Envoy's admin: a listener that routes GET /stats/prometheus
     (Prometheus) and /ready (the readiness probe) to the admin on loopback, answers /livez
     itself (the liveness probe: a worker thread answers) and 404 to everything else. */}}
{{- define "vllm-sr.statsListener" -}}
listeners:
  - name: vsr/stats
    address:
      socket_address: {address: 0.0.0.0, port_value: {{ .Values.envoy.statsPort }}}
    filter_chains:
      - filters:
          - name: envoy.filters.network.http_connection_manager
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
              stat_prefix: vsr_stats
              codec_type: AUTO
              route_config:
                name: vsr/stats
                virtual_hosts:
                  - name: stats
                    domains: ["*"]
                    routes:
                      - match: {path: /stats/prometheus, headers: [{name: ":method", string_match: {exact: GET}}]}
                        route: {cluster: vsr/admin, timeout: 10s}
                      - match: {path: /ready, headers: [{name: ":method", string_match: {exact: GET}}]}
                        route: {cluster: vsr/admin, timeout: 2s}
                      - match: {path: /livez}
                        direct_response: {status: 200, body: {inline_string: "alive\n"}}
                      - match: {prefix: /}
                        direct_response: {status: 404}
              http_filters:
                - name: envoy.filters.http.router
                  typed_config:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
{{- end -}}

{{- define "vllm-sr.adminCluster" -}}
- name: vsr/admin
  type: STATIC
  connect_timeout: 1s
  load_assignment:
    cluster_name: vsr/admin
    endpoints:
      - lb_endpoints:
          - endpoint:
              address:
                socket_address: {address: 127.0.0.1, port_value: {{ .Values.envoy.adminPort }}}
{{- end -}}
