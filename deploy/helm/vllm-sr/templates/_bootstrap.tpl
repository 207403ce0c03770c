{{/* Envoy's bootstrap, as sr_control/compiler/build.py `bootstrap()` writes it (tests/deploy
     holds the two equal): Envoy knows only the control plane and takes everything else over
     ADS. Pass (dict "root" $ "host" H "port" P "isIp" bool). */}}
{{- define "vllm-sr.bootstrap" -}}
{{- $v := .root.Values.envoy -}}
node: {id: {{ $v.nodeId | quote }}, cluster: vllm-sr}
admin:
  address:
    socket_address: {address: {{ $v.adminAddress | quote }}, port_value: {{ $v.adminPort }}}
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
      - envoy_grpc: {cluster_name: vsr/xds, retry_policy: {retry_back_off: {base_interval: 0.1s, max_interval: 1s}}}
  lds_config: {ads: {}, resource_api_version: V3}
  cds_config: {ads: {}, resource_api_version: V3}
static_resources:
  clusters:
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
      circuit_breakers:
        thresholds:
          - {priority: DEFAULT, max_connections: 1024, max_pending_requests: 1024, max_requests: 1024, max_retries: 3}
{{- end -}}
