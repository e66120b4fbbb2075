# One image per service: docker build --build-arg SERVICE=checkpointd -t nodeconfig/checkpointd .
# Where no Docker engine runs, 'make images' builds the same images offline.
FROM golang:1.26 AS build
ARG SERVICE
WORKDIR /src
COPY . .
# The reconciler runs the kubelet validator as a child process found next to
# itself (/nodeconfig-kubelet-check), checkpointd installs the start guard
# found next to itself (/nodeconfig-guard); /out/beside stays empty for statusd.
RUN mkdir -p /out/beside && \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/service nodeconfig.io/services/${SERVICE} && \
    case "${SERVICE}" in \
      reconciler) CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/beside/ nodeconfig.io/services/configcheck/cmd/nodeconfig-kubelet-check ;; \
      checkpointd) CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/beside/ nodeconfig.io/services/checkpointd/cmd/nodeconfig-guard ;; \
    esac

FROM scratch
COPY --from=build /out/service /service
COPY --from=build /out/beside/ /
COPY --from=build --chmod=1777 /tmp /tmp
USER 65532:65532
ENTRYPOINT ["/service"]
