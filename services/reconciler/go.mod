module nodeconfig.io/services/reconciler

go 1.26.0

replace (
	nodeconfig.io/proto => ../../proto
	nodeconfig.io/services/servekit => ../servekit
)
