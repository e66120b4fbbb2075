package fieldpolicy

// Field is a kubelet configuration field the policy guards.
type Field struct {
	// Path is the field's place in a KubeletConfiguration
	// (kubelet.config.k8s.io/v1beta1), its JSON names joined by dots. A path
	// that names an object guards everything beneath it, fields a later
	// kubelet adds included.
	Path string
	// Reason says what an attacker gains by setting the field.
	Reason string
}

// Refused are the fields a drop-in may not set unless an operator allows
// them, sorted by Path. They grant access to the kubelet's API, run code as
// root, change the node's identity or redirect its traffic; resource and
// performance knobs are not here. authentication and authorization are
// guarded whole, so that a field a later kubelet adds beneath them is
// guarded too; an operator may allow a single field beneath them (see
// subFields).
var Refused = []Field{
	{"allowedUnsafeSysctls", "lets pods set kernel parameters that are not safely namespaced, reaching other pods and the host kernel"},
	{"authentication", "decides who a kubelet API caller is: anonymous access, a client CA of the attacker's or no token review lets anyone act as anyone"},
	{"authorization", "decides what a kubelet API caller may do: AlwaysAllow grants any caller every kubelet API, exec into pods included"},
	{"clusterDNS", "sends every pod's DNS lookups to a resolver of the attacker's, which can redirect their traffic"},
	{"clusterDomain", "changes the domain pods resolve service names under, handing those lookups to a zone of the attacker's"},
	{"containerRuntimeEndpoint", "connects the kubelet to a runtime socket of the attacker's, which then runs every container as it likes"},
	{"enableDebuggingHandlers", "reopens the exec, attach, port-forward and log endpoints an operator closed"},
	{"enableSystemLogHandler", "reopens the endpoint that serves the host's /var/log through the kubelet API"},
	{"enableSystemLogQuery", "lets kubelet API callers query the host's journal and log files"},
	{"imagePullCredentialsVerificationPolicy", "lets any pod run private images already on the node without the credentials to pull them"},
	{"imageServiceEndpoint", "connects the kubelet to an image service of the attacker's, which then decides what every image pull returns"},
	{"podLogsDir", "makes the kubelet and runtime create directories and write container-controlled files under any host path"},
	{"preloadedImagesVerificationAllowlist", "exempts images from the pull-credential check, so any pod can run those private images"},
	{"providerID", "claims another cloud instance's identity, so cloud controllers give this node that instance's addresses and traffic"},
	{"readOnlyPort", "opens an unauthenticated port that serves every pod's spec, environment included, and the node's metrics"},
	{"registerWithTaints", "changes the taints a new node registers with, drawing workloads and their secrets onto a node meant to be kept apart"},
	{"resolvConf", "replaces the resolver file of pods that use the host's DNS, sending their lookups to other nameservers"},
	{"seccompDefault", "turns off the default seccomp profile, widening the kernel surface a container can attack to escape"},
	{"serverTLSBootstrap", "changes where the kubelet's serving certificate comes from: off, it serves a self-signed one no client can verify"},
	{"staticPodPath", "runs any pod from a host directory, privileged and with host mounts, past admission control"},
	{"staticPodURL", "runs any pod fetched from a URL, privileged and with host mounts, past admission control"},
	{"staticPodURLHeader", "changes the request for static pods, so the URL can serve other pods or collect the headers' credentials"},
	{"tlsCertFile", "swaps the kubelet's serving certificate for one whose key the attacker holds, to impersonate the kubelet"},
	{"tlsCipherSuites", "lets the kubelet's TLS negotiate weak ciphers an on-path attacker can break"},
	{"tlsCurvePreferences", "narrows the kubelet's TLS key exchange, dropping the post-quantum protection of recorded traffic"},
	{"tlsMinVersion", "lets the kubelet's TLS fall back to old protocol versions an on-path attacker can break"},
	{"tlsPrivateKeyFile", "swaps the kubelet's serving key for one the attacker holds, to impersonate the kubelet"},
	{"tracing", "sends the kubelet's request traces, pod and request details included, to a collector of the attacker's choosing"},
	{"volumePluginDir", "points the kubelet at a directory of FlexVolume drivers it runs as root"},
}

// subFields are the fields beneath the objects in Refused, which an
// operator may allow one by one (say, a webhook cache TTL) without allowing
// the whole object. A test keeps them equal to the kubelet's type.
var subFields = []string{
	"authentication.anonymous",
	"authentication.anonymous.enabled",
	"authentication.webhook",
	"authentication.webhook.cacheTTL",
	"authentication.webhook.enabled",
	"authentication.x509",
	"authentication.x509.clientCAFile",
	"authorization.mode",
	"authorization.webhook",
	"authorization.webhook.cacheAuthorizedTTL",
	"authorization.webhook.cacheUnauthorizedTTL",
	"tracing.endpoint",
	"tracing.samplingRatePerMillion",
}
