{{- /* Fails the install on values the sidecar would refuse; renders nothing. */ -}}
{{- include "leader-elector.validate" . -}}
