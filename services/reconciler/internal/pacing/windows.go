package pacing

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Window is one parsed maintenance window.
type Window struct {
	days       []time.Weekday // empty: every day
	start, end time.Duration  // since midnight; end <= start wraps past it
	loc        *time.Location
}

var weekdays = map[string]time.Weekday{
	"Sun": time.Sunday, "Mon": time.Monday, "Tue": time.Tuesday, "Wed": time.Wednesday,
	"Thu": time.Thursday, "Fri": time.Friday, "Sat": time.Saturday,
}

// ParseWindow reads a window of days ("Mon".."Sun"), start and end
// ("HH:MM") and an IANA time zone (empty: UTC).
func ParseWindow(days []string, start, end, zone string) (Window, error) {
	var w Window
	for _, d := range days {
		wd, ok := weekdays[d]
		if !ok {
			return w, fmt.Errorf("day %q: want one of Mon, Tue, Wed, Thu, Fri, Sat, Sun", d)
		}
		w.days = append(w.days, wd)
	}
	var err error
	if w.start, err = clock(start); err != nil {
		return w, fmt.Errorf("start: %w", err)
	}
	if w.end, err = clock(end); err != nil {
		return w, fmt.Errorf("end: %w", err)
	}
	if w.start == w.end {
		return w, errors.New("start and end are the same time: an empty window")
	}
	if w.loc, err = time.LoadLocation(zone); err != nil {
		return w, fmt.Errorf("timeZone %q: %w", zone, err)
	}
	return w, nil
}

func clock(s string) (time.Duration, error) {
	t, err := time.Parse("15:04", s)
	if err != nil || !strings.Contains(s, ":") {
		return 0, fmt.Errorf("%q: want HH:MM (24-hour)", s)
	}
	return time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute, nil
}

// openAt reports whether the window is open at now. A window that wraps past
// midnight belongs to the day it starts on.
func (w Window) openAt(now time.Time) bool {
	local := now.In(w.loc)
	midnight := time.Date(local.Year(), local.Month(), local.Day(), 0, 0, 0, 0, w.loc)
	for _, dayStart := range []time.Time{midnight, midnight.AddDate(0, 0, -1)} {
		if len(w.days) > 0 && !slices.Contains(w.days, dayStart.Weekday()) {
			continue
		}
		from := at(dayStart, w.start)
		to := at(dayStart, w.end)
		if w.end <= w.start {
			to = at(dayStart.AddDate(0, 0, 1), w.end)
		}
		if !now.Before(from) && now.Before(to) {
			return true
		}
	}
	return false
}

// at is the wall-clock time d after midnight of day, in day's zone (so a
// daylight saving change moves nothing but the offset).
func at(day time.Time, d time.Duration) time.Time {
	return time.Date(day.Year(), day.Month(), day.Day(), int(d/time.Hour), int(d%time.Hour/time.Minute), 0, 0, day.Location())
}

// nextOpen is the first start of the window after now (within 8 days).
func (w Window) nextOpen(now time.Time) time.Time {
	local := now.In(w.loc)
	midnight := time.Date(local.Year(), local.Month(), local.Day(), 0, 0, 0, 0, w.loc)
	for i := range 8 {
		day := midnight.AddDate(0, 0, i)
		if len(w.days) > 0 && !slices.Contains(w.days, day.Weekday()) {
			continue
		}
		if from := at(day, w.start); from.After(now) {
			return from
		}
	}
	return time.Time{}
}

// Windows are a NodeConfig's maintenance windows; none means always open.
type Windows []Window

// Open reports whether a trial may start at now, and if not, when the next
// window opens.
func (ws Windows) Open(now time.Time) (bool, time.Time) {
	if len(ws) == 0 {
		return true, time.Time{}
	}
	var next time.Time
	for _, w := range ws {
		if w.openAt(now) {
			return true, time.Time{}
		}
		if n := w.nextOpen(now); !n.IsZero() && (next.IsZero() || n.Before(next)) {
			next = n
		}
	}
	return false, next
}
