module nodeconfig.io/services/kubectl-nodeconfig

go 1.26.0

replace (
	nodeconfig.io/proto => ../../proto
	nodeconfig.io/services/api => ../api
)

require (
	github.com/pmezard/go-difflib v1.0.1-0.20181226105442-5d4384ee4fb2
	github.com/spf13/cobra v1.10.2
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
	k8s.io/api v0.36.3
	k8s.io/apimachinery v0.36.3
	k8s.io/client-go v0.36.3
	k8s.io/streaming v0.36.3
	k8s.io/utils v0.0.0-20260210185600-b8788abfbbc2
	nodeconfig.io/proto v0.0.0
	nodeconfig.io/services/api v0.0.0
)

require (
	github.com/Azure/go-ansiterm v0.0.0-20230124172434-306776ec8161 // indirect
	github.com/blang/semver/v4 v4.0.0 // indirect
	github.com/go-errors/errors v1.4.2 // indirect
	github.com/google/btree v1.1.3 // indirect
	github.com/liggitt/tabwriter v0.0.0-20181228230101-89fcab3d43de // indirect
	github.com/moby/term v0.5.0 // indirect
	github.com/monochromegane/go-gitignore v0.0.0-20200626010858-205db1a8cc00 // indirect
	github.com/peterbourgon/diskv v2.0.1+incompatible // indirect
	github.com/xlab/treeprint v1.2.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	sigs.k8s.io/kustomize/api v0.21.1 // indirect
	sigs.k8s.io/kustomize/kyaml v0.21.1 // indirect
)

require (
	github.com/davecgh/go-spew v1.1.2-0.20180830191138-d8f796af33cc // indirect
	github.com/emicklei/go-restful/v3 v3.13.0 // indirect
	github.com/fxamacker/cbor/v2 v2.9.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-openapi/jsonpointer v0.21.0 // indirect
	github.com/go-openapi/jsonreference v0.20.2 // indirect
	github.com/go-openapi/swag v0.23.0 // indirect
	github.com/google/gnostic-models v0.7.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/gorilla/websocket v1.5.4-0.20250319132907-e064f32e3674 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/josharian/intern v1.0.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/mailru/easyjson v0.7.7 // indirect
	github.com/moby/spdystream v0.5.1 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.3-0.20250322232337-35a7c28c31ee // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/oauth2 v0.37.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/term v0.46.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	golang.org/x/time v0.14.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	gopkg.in/evanphx/json-patch.v4 v4.13.0 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
	k8s.io/cli-runtime v0.36.3
	k8s.io/klog/v2 v2.140.0 // indirect
	k8s.io/kube-openapi v0.0.0-20260317180543-43fb72c5454a // indirect
	nodeconfig.io/services/configcheck v0.0.0
	sigs.k8s.io/json v0.0.0-20250730193827-2d320260d730 // indirect
	sigs.k8s.io/randfill v1.0.0 // indirect
	sigs.k8s.io/structured-merge-diff/v6 v6.3.3 // indirect
	sigs.k8s.io/yaml v1.6.0
)

replace nodeconfig.io/services/configcheck => ../configcheck

replace k8s.io/api => k8s.io/api v0.36.3

replace k8s.io/apiextensions-apiserver => k8s.io/apiextensions-apiserver v0.36.3

replace k8s.io/apimachinery => k8s.io/apimachinery v0.36.3

replace k8s.io/apiserver => k8s.io/apiserver v0.36.3

replace k8s.io/cli-runtime => k8s.io/cli-runtime v0.36.3

replace k8s.io/client-go => k8s.io/client-go v0.36.3

replace k8s.io/cloud-provider => k8s.io/cloud-provider v0.36.3

replace k8s.io/cluster-bootstrap => k8s.io/cluster-bootstrap v0.36.3

replace k8s.io/code-generator => k8s.io/code-generator v0.36.3

replace k8s.io/component-base => k8s.io/component-base v0.36.3

replace k8s.io/component-helpers => k8s.io/component-helpers v0.36.3

replace k8s.io/controller-manager => k8s.io/controller-manager v0.36.3

replace k8s.io/cri-api => k8s.io/cri-api v0.36.3

replace k8s.io/cri-client => k8s.io/cri-client v0.36.3

replace k8s.io/cri-streaming => k8s.io/cri-streaming v0.36.3

replace k8s.io/csi-translation-lib => k8s.io/csi-translation-lib v0.36.3

replace k8s.io/dynamic-resource-allocation => k8s.io/dynamic-resource-allocation v0.36.3

replace k8s.io/endpointslice => k8s.io/endpointslice v0.36.3

replace k8s.io/externaljwt => k8s.io/externaljwt v0.36.3

replace k8s.io/kms => k8s.io/kms v0.36.3

replace k8s.io/kube-aggregator => k8s.io/kube-aggregator v0.36.3

replace k8s.io/kube-controller-manager => k8s.io/kube-controller-manager v0.36.3

replace k8s.io/kube-proxy => k8s.io/kube-proxy v0.36.3

replace k8s.io/kube-scheduler => k8s.io/kube-scheduler v0.36.3

replace k8s.io/kubectl => k8s.io/kubectl v0.36.3

replace k8s.io/kubelet => k8s.io/kubelet v0.36.3

replace k8s.io/metrics => k8s.io/metrics v0.36.3

replace k8s.io/mount-utils => k8s.io/mount-utils v0.36.3

replace k8s.io/pod-security-admission => k8s.io/pod-security-admission v0.36.3

replace k8s.io/sample-apiserver => k8s.io/sample-apiserver v0.36.3

replace k8s.io/sample-cli-plugin => k8s.io/sample-cli-plugin v0.36.3

replace k8s.io/sample-controller => k8s.io/sample-controller v0.36.3

replace k8s.io/streaming => k8s.io/streaming v0.36.3
