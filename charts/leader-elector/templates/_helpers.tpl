{{/*
Every template here takes this chart's context: `.` inside this chart, and
`(index .Subcharts "leader-elector")` in a chart that depends on this one
(the alias, if the dependency has one).
*/}}

{{/*
Expand the name of the chart.
*/}}
{{- define "leader-elector.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
A default fully qualified name, truncated to 63 characters (DNS-1123
labels). A release name that contains the chart name is used as is.
*/}}
{{- define "leader-elector.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version for the helm.sh/chart label.
*/}}
{{- define "leader-elector.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels.
*/}}
{{- define "leader-elector.labels" -}}
helm.sh/chart: {{ include "leader-elector.chart" . }}
{{ include "leader-elector.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels.
*/}}
{{- define "leader-elector.selectorLabels" -}}
app.kubernetes.io/name: {{ include "leader-elector.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The ServiceAccount the sidecars run as.
*/}}
{{- define "leader-elector.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "leader-elector.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The Lease the candidates elect on.
*/}}
{{- define "leader-elector.leaseName" -}}
{{- default (include "leader-elector.fullname" .) .Values.lease.name }}
{{- end }}

{{/*
The Service whose EndpointSlice the leader writes in routing.mode
endpointslice: routing.service, else the Lease's name.
*/}}
{{/*
The app's health endpoint with healthGating.enabled: healthGating.url, else
the demo app's /healthz.
*/}}
{{- define "leader-elector.healthURL" -}}
{{- if .Values.healthGating.url }}
{{- .Values.healthGating.url }}
{{- else if .Values.demo.enabled -}}
http://127.0.0.1:8081/healthz
{{- end }}
{{- end }}

{{/*
The Lease where health gating's candidates publish their health.
*/}}
{{- define "leader-elector.candidatesOn" -}}
{{- if and (or .Values.healthGating.enabled .Values.successor.enabled) (eq (int .Values.partitions.count) 0) .Values.election.candidate }}true{{ end }}
{{- end }}

{{/*
The Lease where the candidates publish their entries (health gating's
health, the successor's revision).
*/}}
{{- define "leader-elector.candidatesLeaseName" -}}
{{- printf "%s-candidates" (include "leader-elector.leaseName" .) }}
{{- end }}

{{- define "leader-elector.routeService" -}}
{{- default (include "leader-elector.leaseName" .) .Values.routing.service }}
{{- end }}

{{/*
The name of the routing mode's admission policy and its binding:
cluster-scoped, so it carries the namespace and the Lease's name, as the
kustomize components' do.
*/}}
{{- define "leader-elector.admissionPolicyName" -}}
{{- printf "leader-elector-route-%s.%s.%s" .Values.routing.mode .Release.Namespace (include "leader-elector.leaseName" .) }}
{{- end }}

{{/*
Partition mode's admission policy and binding, named as the routing
modes' are.
*/}}
{{- define "leader-elector.partitionsPolicyName" -}}
{{- printf "leader-elector-partitions.%s.%s" .Release.Namespace (include "leader-elector.leaseName" .) }}
{{- end }}

{{/*
The ServiceAccount's username as the admission policies' CEL compares it:
the namespace and the name quoted apart, as the kustomize components write
them (so that the packaging tests can hold the two equal). Names of
Kubernetes objects hold no quote.
*/}}
{{- define "leader-elector.policyUsername" -}}
{{- printf "'system:serviceaccount:' + '%s' + ':' + '%s'" .Release.Namespace (include "leader-elector.serviceAccountName" .) }}
{{- end }}

{{/*
Whether this install renders an admission policy: "true" or "".
*/}}
{{- define "leader-elector.admissionPolicies" -}}
{{- if or (and (ne .Values.routing.mode "none") .Values.routing.admissionPolicy) (and (gt (int .Values.partitions.count) 0) .Values.partitions.admissionPolicy) }}true{{ end }}
{{- end }}

{{/*
The sidecar image reference.
*/}}
{{- define "leader-elector.image" -}}
{{- if not .Values.image.repository }}
{{- fail "image.repository is required: no official image is published yet; set it to where you pushed the image (make release REGISTRY=<registry>/<path> pushes <registry>/<path>/leader-elector), e.g. --set image.repository=registry.example.com/team/leader-elector" }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The pod's imagePullSecrets (the imagePullSecrets value), for a pod spec's
imagePullSecrets: list; nothing when there are none. Use it as
  {{- with include "leader-elector.imagePullSecrets" $le }}
  imagePullSecrets:
    {{- . | nindent 4 }}
  {{- end }}
*/}}
{{- define "leader-elector.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/*
The environment that tells the app where its sidecar answers, as items of
the app container's env: LEADER_ELECTOR_URL, e.g. http://127.0.0.1:4040
(sidecar.httpPort). The app asks $LEADER_ELECTOR_URL/leader.
*/}}
{{- define "leader-elector.appEnv" -}}
- name: LEADER_ELECTOR_URL
  value: {{ printf "http://127.0.0.1:%v" .Values.sidecar.httpPort | quote }}
{{- end }}

{{/*
A number of seconds as a Go duration flag value: 15 → 15s, 0.5 → 0.5s.
*/}}
{{- define "leader-elector.seconds" -}}
{{- printf "%vs" (float64 .) }}
{{- end }}

{{/*
The sidecar container, as one item of a container list. Put it under
initContainers when sidecar.native is true (it then has restartPolicy:
Always), under containers otherwise; leader-elector.initContainers and
leader-elector.containers do that choice for you.

Mount leader-elector.volumes in the pod, and set
automountServiceAccountToken: false on it so that only the sidecar gets the
ServiceAccount's token.
*/}}
{{- define "leader-elector.sidecar" -}}
{{- include "leader-elector.validate" . -}}
- name: leader-elector
  image: {{ include "leader-elector.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if .Values.sidecar.native }}
  restartPolicy: Always
  {{- end }}
  args:
    - --lease-name={{ include "leader-elector.leaseName" . }}
    - --lease-duration={{ include "leader-elector.seconds" .Values.election.leaseDurationSeconds }}
    - --renew-deadline={{ include "leader-elector.seconds" .Values.election.renewDeadlineSeconds }}
    - --retry-period={{ include "leader-elector.seconds" .Values.election.retryPeriodSeconds }}
    - --readiness={{ (include "leader-elector.readiness" .) }}
    {{- if not .Values.election.candidate }}
    - --candidate=false
    {{- else if ne .Values.election.campaign "auto" }}
    - --campaign={{ .Values.election.campaign }}
    {{- end }}
    - --release-on-shutdown={{ .Values.election.releaseOnShutdown }}
    - --http-address=127.0.0.1:{{ .Values.sidecar.httpPort }}
    - --probe-address=:{{ .Values.sidecar.probePort }}
    {{- if gt (int .Values.partitions.count) 0 }}
    - --partitions={{ .Values.partitions.count }}
    - --drain-timeout={{ include "leader-elector.seconds" .Values.partitions.drainTimeoutSeconds }}
    {{- else }}
    - --events={{ .Values.election.events }}
    {{- end }}
    - --log-format={{ .Values.sidecar.logFormat }}
    - -v={{ .Values.sidecar.logVerbosity }}
    {{- if ne .Values.routing.mode "none" }}
    - --route={{ .Values.routing.mode }}
    {{- end }}
    {{- if .Values.healthGating.enabled }}
    - --app-health-url={{ include "leader-elector.healthURL" . }}
    - --app-health-period={{ include "leader-elector.seconds" .Values.healthGating.periodSeconds }}
    - --app-health-failures={{ .Values.healthGating.failures }}
    - --app-health-successes={{ .Values.healthGating.successes }}
    {{- else if include "leader-elector.candidatesOn" . }}
    - --name-successor
    {{- end }}
    {{- if include "leader-elector.candidatesOn" . }}
    - --handover-to-newer-revision={{ .Values.successor.handoverToNewerRevisionSeconds }}s
    {{- if .Values.successor.enabled }}
    - --check-pod-terminating
    {{- end }}
    {{- end }}
    {{- if eq .Values.routing.mode "endpointslice" }}
    - --service={{ include "leader-elector.routeService" . }}
    {{- end }}
    {{- if eq .Values.routing.mode "label" }}
    - --leader-label={{ .Values.routing.leaderLabel }}
    {{- end }}
    {{- if gt (int .Values.election.advertisePort) 0 }}
    - --advertise-port={{ .Values.election.advertisePort }}
    {{- end }}
    {{- if .Values.proxy.enabled }}
    - --proxy-address=:{{ .Values.proxy.port }}
    - --proxy-peer-address=:{{ .Values.proxy.peerPort }}
    - --proxy-upstream=127.0.0.1:{{ .Values.proxy.upstreamPort }}
    - --proxy-drain={{ include "leader-elector.seconds" .Values.proxy.drainSeconds }}
    - --proxy-shutdown-delay={{ include "leader-elector.seconds" .Values.proxy.shutdownDelaySeconds }}
    {{- end }}
    {{- with .Values.sidecar.extraArgs }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    {{- if include "leader-elector.candidatesOn" . }}
    # The pod's revision (--revision): a release names a successor of the
    # newest. A Deployment's pods carry the first label, a StatefulSet's
    # the second; the missing one is empty.
    - name: POD_TEMPLATE_HASH
      valueFrom:
        fieldRef:
          fieldPath: metadata.labels['pod-template-hash']
    - name: CONTROLLER_REVISION_HASH
      valueFrom:
        fieldRef:
          fieldPath: metadata.labels['controller-revision-hash']
    {{- end }}
    {{- if or (eq .Values.routing.mode "endpointslice") (gt (int .Values.election.advertisePort) 0) }}
    # The endpoint the leader publishes, and the host of its advertised
    # address.
    - name: POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    {{- end }}
    {{- if dig "limits" "memory" "" .Values.sidecar.resources }}
    - name: GOMEMLIMIT
      valueFrom:
        resourceFieldRef:
          containerName: leader-elector
          resource: limits.memory
    {{- end }}
    {{- with .Values.sidecar.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: elector-probes
      containerPort: {{ .Values.sidecar.probePort }}
    {{- if .Values.proxy.enabled }}
    - name: elector-proxy
      containerPort: {{ .Values.proxy.port }}
    - name: elector-peer
      containerPort: {{ .Values.proxy.peerPort }}
    {{- end }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: elector-probes
    {{- toYaml .Values.sidecar.readinessProbe | nindent 4 }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: elector-probes
    {{- toYaml .Values.sidecar.livenessProbe | nindent 4 }}
  {{- with .Values.sidecar.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.sidecar.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: leader-elector-token
      mountPath: /var/run/secrets/kubernetes.io/serviceaccount
      readOnly: true
{{- end }}

{{/*
The sidecar when it is a native sidecar (sidecar.native), else nothing: for
a pod's initContainers. With supervisor.enabled, first the init container
that copies the binary for `leader-elector run`.
*/}}
{{- define "leader-elector.initContainers" -}}
{{- if .Values.supervisor.enabled }}
{{- include "leader-elector.supervisorInitContainer" . }}
{{- end }}
{{- if .Values.sidecar.native }}
{{ include "leader-elector.sidecar" . }}
{{- end }}
{{- end }}

{{/*
With supervisor.enabled: the init container that copies the leader-elector
binary into the leader-elector-run emptyDir, for the app container's
`leader-elector run` (the image is distroless: the binary copies itself).
*/}}
{{- define "leader-elector.supervisorInitContainer" -}}
- name: leader-elector-copy
  image: {{ include "leader-elector.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["run", "--copy-to=/leader-elector-run/leader-elector"]
  {{- with .Values.sidecar.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  resources:
    requests:
      cpu: 10m
      memory: 16Mi
    limits:
      cpu: 100m
      memory: 64Mi
  volumeMounts:
    - name: leader-elector-run
      mountPath: /leader-elector-run
{{- end }}

{{/*
With supervisor.enabled: the app container's mount of the supervisor's
binary, as one item of its volumeMounts.
*/}}
{{- define "leader-elector.supervisorMount" -}}
- name: leader-elector-run
  mountPath: /leader-elector-run
  readOnly: true
{{- end }}

{{/*
With supervisor.enabled: the start of the app container's command, as items
of a list; the app's own command and arguments follow it.
*/}}
{{- define "leader-elector.supervisorCommand" -}}
- /leader-elector-run/leader-elector
- run
- --log-format={{ .Values.sidecar.logFormat }}
- --stop-grace={{ .Values.supervisor.stopGrace }}
{{- if gt (int .Values.partitions.count) 0 }}
- --partitions
{{- end }}
- --
{{- end }}

{{/*
The sidecar when it is an ordinary container (sidecar.native false), else
nothing: for a pod's containers.
*/}}
{{- define "leader-elector.containers" -}}
{{- if not .Values.sidecar.native }}
{{- include "leader-elector.sidecar" . }}
{{- end }}
{{- end }}

{{/*
The sidecar's ServiceAccount token, CA and namespace, as one item of a pod's
volumes: what the kubelet mounts into every container with
automountServiceAccountToken, here for the sidecar alone; with
supervisor.enabled also the leader-elector-run emptyDir.
*/}}
{{- define "leader-elector.volumes" -}}
- name: leader-elector-token
  projected:
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: 3607
      - configMap:
          name: kube-root-ca.crt
          items:
            - key: ca.crt
              path: ca.crt
      - downwardAPI:
          items:
            - path: namespace
              fieldRef:
                fieldPath: metadata.namespace
{{- if .Values.supervisor.enabled }}
- name: leader-elector-run
  emptyDir:
    sizeLimit: 128Mi
{{- end }}
{{- end }}

{{/*
A Deployment strategy that does not deadlock. With readiness leader only the
leader is ever Ready, so a rolling update that waits for new pods to become
available never ends; maxUnavailable 100% replaces all pods at once and the
new ones take over when the old leader releases. With readiness candidate a
normal one-by-one rolling update works.
*/}}
{{/*
The readiness mode: election.readiness, else candidate with the proxy on
(every pod forwards to the leader) and leader without.
*/}}
{{- define "leader-elector.readiness" -}}
{{- if .Values.election.readiness -}}
{{- .Values.election.readiness -}}
{{- else if .Values.proxy.enabled -}}
candidate
{{- else -}}
leader
{{- end -}}
{{- end }}

{{- define "leader-elector.strategy" -}}
{{- if and (eq (include "leader-elector.readiness" .) "leader") (not .Values.partitions.count) -}}
type: RollingUpdate
rollingUpdate:
  maxSurge: 0
  maxUnavailable: 100%
{{- else -}}
type: RollingUpdate
rollingUpdate:
  maxSurge: 1
  maxUnavailable: 0
{{- end }}
{{- end }}

{{/*
What a Kubernetes version error adds: helm install renders for the
cluster's version, helm template for its own default (v1.20.0 in a helm
built without its release flags) unless told.
*/}}
{{- define "leader-elector.kubeVersionHint" -}}
{{- print " (the cluster's version with helm install; with helm template, helm's default unless you pass --kube-version: pass your cluster's, e.g. --kube-version 1.34.0)" }}
{{- end }}

{{/*
Refuse values the sidecar would refuse at start (it exits 2 on them), or
that cannot work.
*/}}
{{- define "leader-elector.validate" -}}
{{- /* Checked here rather than by Chart.yaml's kubeVersion, whose failure
(“incompatible with Kubernetes v1.20.0” from a helm that assumes 1.20 for
helm template) does not say what to do. 1.30 is the oldest release `make
e2e-matrix` runs (docs/operations.md, "Supported Kubernetes versions"); every
supported release has ValidatingAdmissionPolicy v1 (1.30) and native sidecars
(on by default from 1.29), so neither needs a check of its own. */}}
{{- if semverCompare "<1.30-0" .Capabilities.KubeVersion.Version }}
{{- fail (printf "leader-elector supports Kubernetes 1.30 or later (the oldest release its tests run), and helm renders for %s%s" .Capabilities.KubeVersion.Version (include "leader-elector.kubeVersionHint" .)) }}
{{- end }}
{{- $e := .Values.election }}
{{- $lease := float64 $e.leaseDurationSeconds }}
{{- $renew := float64 $e.renewDeadlineSeconds }}
{{- $retry := float64 $e.retryPeriodSeconds }}
{{- if ne $lease (floor $lease) }}
{{- fail (printf "election.leaseDurationSeconds must be whole seconds (the Lease stores seconds), got %v" $e.leaseDurationSeconds) }}
{{- end }}
{{- if or (le $lease 0.0) (le $renew 0.0) (le $retry 0.0) }}
{{- fail "election.leaseDurationSeconds, renewDeadlineSeconds and retryPeriodSeconds must be positive" }}
{{- end }}
{{- /* The sidecar's supported ranges (docs/security.md, "Inputs"). */}}
{{- if or (lt $lease 2.0) (gt $lease 86400.0) }}
{{- fail (printf "election.leaseDurationSeconds must be within 2..86400 (24h), got %v" $e.leaseDurationSeconds) }}
{{- end }}
{{- if or (lt $renew 1.0) (gt $renew 86400.0) }}
{{- fail (printf "election.renewDeadlineSeconds must be within 1..86400 (24h), got %v" $e.renewDeadlineSeconds) }}
{{- end }}
{{- if or (lt $retry 0.1) (gt $retry 86400.0) }}
{{- fail (printf "election.retryPeriodSeconds must be within 0.1..86400 (24h), got %v" $e.retryPeriodSeconds) }}
{{- end }}
{{- if le $lease $renew }}
{{- fail (printf "election.leaseDurationSeconds (%v) must be greater than election.renewDeadlineSeconds (%v)" $e.leaseDurationSeconds $e.renewDeadlineSeconds) }}
{{- end }}
{{- /* --proxy-drain must be shorter than --proxy-wait, the renew deadline. */}}
{{- if and .Values.proxy.enabled (gt (float64 .Values.proxy.drainSeconds) 0.0) (ge (float64 .Values.proxy.drainSeconds) $renew) }}
{{- fail (printf "proxy.drainSeconds (%v) must be shorter than election.renewDeadlineSeconds (%v): connections that arrive during a drain wait for the next leader up to the renew deadline" .Values.proxy.drainSeconds $e.renewDeadlineSeconds) }}
{{- end }}
{{- /* election.MinMargin: the largest of 1 s, 1% of the lease and the retry period. */}}
{{- $margin := maxf 1.0 (divf $lease 100.0) $retry }}
{{- if lt (subf $lease $renew) $margin }}
{{- fail (printf "election.leaseDurationSeconds (%v) must exceed election.renewDeadlineSeconds (%v) by at least %v s (the largest of 1 s, 1%% of the lease duration and the retry period): the difference absorbs clock-rate drift and the time a leader's work takes to stop" $e.leaseDurationSeconds $e.renewDeadlineSeconds $margin) }}
{{- end }}
{{- if le $renew (mulf $retry 1.2) }}
{{- fail (printf "election.renewDeadlineSeconds (%v) must be greater than 1.2 × election.retryPeriodSeconds (%v)" $e.renewDeadlineSeconds $e.retryPeriodSeconds) }}
{{- end }}
{{- $explicitQPS := false }}
{{- range .Values.sidecar.extraArgs }}
{{- if and (hasPrefix "--kube-api-qps=" .) (ne . "--kube-api-qps=0") }}{{ $explicitQPS = true }}{{ end }}
{{- end }}
{{- range .Values.sidecar.extraEnv }}
{{- if eq .name "LEADER_ELECTOR_KUBE_API_QPS" }}{{ $explicitQPS = true }}{{ end }}
{{- end }}
{{- if and (gt (int .Values.partitions.count) 0) (not $explicitQPS) (gt (divf (add1 (int .Values.partitions.count)) $retry) 1000.0) }}
{{- fail (printf "partitions.count=%v with election.retryPeriodSeconds=%v needs more than 1000 Lease requests per second per pod, the most the sidecar derives: lengthen the retry period or set --kube-api-qps in sidecar.extraArgs" .Values.partitions.count $e.retryPeriodSeconds) }}
{{- end }}
{{- if and (gt (int .Values.partitions.count) 0) (gt (len (include "leader-elector.leaseName" .)) 63) }}
{{- fail (printf "partitions.count needs a lease name of at most 63 characters (it is a label value), got %q" (include "leader-elector.leaseName" .)) }}
{{- end }}
{{- if and .Values.proxy.enabled (gt (int .Values.partitions.count) 0) }}
{{- fail "proxy forwards to the one leader; it cannot be combined with partitions.count" }}
{{- end }}
{{- if and .Values.proxy.enabled (or (lt (int .Values.proxy.upstreamPort) 1) (gt (int .Values.proxy.upstreamPort) 65535)) }}
{{- fail (printf "proxy.enabled needs proxy.upstreamPort, the app's port on 127.0.0.1 (1..65535), got %v" .Values.proxy.upstreamPort) }}
{{- end }}
{{- if and .Values.proxy.enabled (has (int .Values.proxy.port) (list (int .Values.proxy.peerPort) (int .Values.sidecar.httpPort) (int .Values.sidecar.probePort))) }}
{{- fail (printf "proxy.port %v overlaps proxy.peerPort, sidecar.httpPort or sidecar.probePort: each needs its own port" .Values.proxy.port) }}
{{- end }}
{{- if and .Values.proxy.enabled (has (int .Values.proxy.peerPort) (list (int .Values.sidecar.httpPort) (int .Values.sidecar.probePort))) }}
{{- fail (printf "proxy.peerPort %v overlaps sidecar.httpPort or sidecar.probePort: each needs its own port" .Values.proxy.peerPort) }}
{{- end }}
{{- if and .Values.healthGating.enabled (not (include "leader-elector.healthURL" .)) }}
{{- fail "healthGating.enabled needs healthGating.url (http://127.0.0.1:<port>/<path>, the app's health endpoint)" }}
{{- end }}
{{- if and (include "leader-elector.candidatesOn" .) (gt (len (include "leader-elector.candidatesLeaseName" .)) 253) }}
{{- fail (printf "healthGating and successor.enabled need a lease name of at most 242 characters (the candidates Lease adds \"-candidates\"), got %q" (include "leader-elector.leaseName" .)) }}
{{- end }}
{{- if not (has .Values.election.campaign (list "auto" "manual")) }}
{{- fail (printf "election.campaign must be auto or manual, got %q" .Values.election.campaign) }}
{{- end }}
{{- if and (ne .Values.election.campaign "auto") (gt (int .Values.partitions.count) 0) }}
{{- fail "election.campaign=manual is for leader election; partition mode spreads its partitions by itself" }}
{{- end }}
{{- if not .Values.election.candidate }}
{{- if gt (int .Values.partitions.count) 0 }}
{{- fail "election.candidate=false is for leader election; a partition group member always takes part" }}
{{- end }}
{{- if ne .Values.election.campaign "auto" }}
{{- fail "election.campaign=manual campaigns when asked, and election.candidate=false never does; give one of them" }}
{{- end }}
{{- if eq (include "leader-elector.readiness" .) "leader" }}
{{- fail "election.readiness=leader would never pass with election.candidate=false (an observer never leads): set election.readiness=candidate" }}
{{- end }}
{{- if ne .Values.routing.mode "none" }}
{{- fail (printf "routing.mode=%s publishes the leader; observers (election.candidate=false) never lead: set routing.mode=none" .Values.routing.mode) }}
{{- end }}
{{- if .Values.lease.create }}
{{- fail "election.candidate=false: observers follow the candidates' Lease; set lease.create=false and lease.name to that Lease" }}
{{- end }}
{{- if .Values.healthGating.enabled }}
{{- fail "healthGating gates a pod's candidacy, and election.candidate=false has none: give one of them" }}
{{- end }}
{{- if gt (int .Values.election.advertisePort) 0 }}
{{- fail "election.advertisePort publishes the leader's address, and observers (election.candidate=false) never lead: give one of them" }}
{{- end }}
{{- end }}
{{- if and (gt (int .Values.partitions.count) 0) (gt (int .Values.election.advertisePort) 0) }}
{{- fail "election.advertisePort publishes one leader's address; partition mode (partitions.count) has no one leader: set one of them to 0" }}
{{- end }}
{{- if eq (int .Values.sidecar.httpPort) (int .Values.sidecar.probePort) }}
{{- fail "sidecar.httpPort and sidecar.probePort must differ" }}
{{- end }}
{{- if and (ne .Values.routing.mode "none") (eq (include "leader-elector.readiness" .) "leader") }}
{{- fail (printf "routing.mode=%s keeps every pod Ready as a candidate and routes by its own writes: set election.readiness=candidate" .Values.routing.mode) }}
{{- end }}
{{- if and (eq .Values.routing.mode "label") (gt (len (include "leader-elector.leaseName" .)) 63) }}
{{- fail (printf "routing.mode=label labels the pods with the Lease's name, which must then be at most 63 characters: %s" (include "leader-elector.leaseName" .)) }}
{{- end }}
{{- $leaderLabel := .Values.routing.leaderLabel }}
{{- if and (eq .Values.routing.mode "label") (or (has $leaderLabel (list "pod-template-hash" "controller-revision-hash" "pod-template-generation" "controller-uid" "job-name")) (regexMatch "^([^/]*\\.)?(kubernetes\\.io|k8s\\.io)/" $leaderLabel)) }}
{{- fail (printf "routing.leaderLabel %q is reserved for Kubernetes (its controllers' labels, the kubernetes.io/ and k8s.io/ prefixes): the sidecar refuses it; choose a key under your own prefix" $leaderLabel) }}
{{- end }}
{{- if and (eq .Values.routing.mode "label") (not (regexMatch "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$" $leaderLabel)) }}
{{- fail (printf "routing.leaderLabel %q is not a label key ([prefix/]name, e.g. example.com/leader)" $leaderLabel) }}
{{- end }}
{{- /* The admission policies are written for the values below; a sidecar
told otherwise through extraArgs or extraEnv would write what its policy
refuses (or, for the ServiceAccount, be matched by none). */}}
{{- if include "leader-elector.admissionPolicies" . }}
{{- $owned := dict "lease-name" "lease.name" "election" "lease.name" "leader-label" "routing.leaderLabel" "route" "routing.mode" "service" "routing.service" "partitions" "partitions.count" }}
{{- range .Values.sidecar.extraArgs }}
{{- $arg := . }}
{{- range $flag, $value := $owned }}
{{- if or (eq $arg (printf "--%s" $flag)) (hasPrefix (printf "--%s=" $flag) $arg) (eq $arg (printf "-%s" $flag)) (hasPrefix (printf "-%s=" $flag) $arg) }}
{{- fail (printf "sidecar.extraArgs sets --%s, which the admission policies (routing.admissionPolicy, partitions.admissionPolicy) are written for: set %s instead" $flag $value) }}
{{- end }}
{{- end }}
{{- end }}
{{- range .Values.sidecar.extraEnv }}
{{- $name := .name }}
{{- range $flag, $value := $owned }}
{{- if eq $name (printf "LEADER_ELECTOR_%s" (upper (replace "-" "_" $flag))) }}
{{- fail (printf "sidecar.extraEnv sets %s, which the admission policies (routing.admissionPolicy, partitions.admissionPolicy) are written for: set %s instead" $name $value) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
