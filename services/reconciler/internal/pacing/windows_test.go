package pacing

import (
	"testing"
	"time"
)

func TestWindowsOpenAndNext(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	night, err := ParseWindow([]string{"Sat", "Sun"}, "22:00", "02:00", "Europe/Paris") // wraps past midnight
	if err != nil {
		t.Fatal(err)
	}
	ws := Windows{night}
	for _, tc := range []struct {
		at       time.Time
		open     bool
		nextOpen time.Time
	}{
		// Saturday 2026-11-21 23:00 Paris: open.
		{time.Date(2026, 11, 21, 23, 0, 0, 0, paris), true, time.Time{}},
		// Sunday 01:30: still Saturday's window.
		{time.Date(2026, 11, 22, 1, 30, 0, 0, paris), true, time.Time{}},
		// Monday 01:30: Sunday's window, wrapped.
		{time.Date(2026, 11, 23, 1, 30, 0, 0, paris), true, time.Time{}},
		// Tuesday 01:30: closed (Monday has none); next is Saturday 22:00.
		{time.Date(2026, 11, 24, 1, 30, 0, 0, paris), false, time.Date(2026, 11, 28, 22, 0, 0, 0, paris)},
		// Sunday 12:00: closed; next is the same evening.
		{time.Date(2026, 11, 22, 12, 0, 0, 0, paris), false, time.Date(2026, 11, 22, 22, 0, 0, 0, paris)},
		// The same instant seen in UTC decides the same way.
		{time.Date(2026, 11, 21, 22, 0, 0, 0, time.UTC), true, time.Time{}},
	} {
		open, next := ws.Open(tc.at)
		if open != tc.open || !next.Equal(tc.nextOpen) {
			t.Errorf("at %v: open %v next %v; want %v %v", tc.at, open, next, tc.open, tc.nextOpen)
		}
	}
	if open, _ := (Windows{}).Open(time.Now()); !open {
		t.Fatal("no windows must mean always open")
	}
	for _, bad := range [][4]string{
		{"Funday", "01:00", "02:00", ""}, {"", "25:00", "02:00", ""}, {"", "1am", "02:00", ""},
		{"", "02:00", "02:00", ""}, {"", "01:00", "02:00", "Mars/Olympus"},
	} {
		var days []string
		if bad[0] != "" {
			days = []string{bad[0]}
		}
		if _, err := ParseWindow(days, bad[1], bad[2], bad[3]); err == nil {
			t.Errorf("window %v parsed; want an error", bad)
		}
	}
}
