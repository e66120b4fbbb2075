module nodeconfig.io/test

go 1.26.0

replace (
	nodeconfig.io/proto => ../proto
	nodeconfig.io/services/checkpointd => ../services/checkpointd
	nodeconfig.io/services/reconciler => ../services/reconciler
	nodeconfig.io/services/servekit => ../services/servekit
	nodeconfig.io/services/statusd => ../services/statusd
)
