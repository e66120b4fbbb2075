package main

import "fmt"

// etcdWrites are etcd's own counts of what it wrote: the bytes appended to
// its write-ahead log (every revision of every object, whole) and the
// bytes of the values put.
type etcdWrites struct{ wal, put float64 }

func (w etcdWrites) minus(before etcdWrites) etcdWrites {
	return etcdWrites{w.wal - before.wal, w.put - before.put}
}

// readEtcdWrites reads etcdWrites from the /metrics page etcd serves on
// its client address.
func readEtcdWrites(clientURL string) (etcdWrites, error) {
	page, err := fetch(clientURL + "/metrics")
	if err != nil {
		return etcdWrites{}, err
	}
	families, err := parseMetrics(page)
	if err != nil {
		return etcdWrites{}, err
	}
	value := func(name string) (float64, error) {
		f, ok := families[name]
		if !ok || len(f.GetMetric()) != 1 {
			return 0, fmt.Errorf("etcd's metrics at %s: no single %s", clientURL, name)
		}
		m := f.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue(), nil
		}
		return m.GetGauge().GetValue(), nil
	}
	var w etcdWrites
	if w.wal, err = value("etcd_disk_wal_write_bytes_total"); err != nil {
		return w, err
	}
	w.put, err = value("etcd_debugging_mvcc_total_put_size_in_bytes")
	return w, err
}
