package overload

import "strings"

// Criticality is how much a request matters when the service is overloaded, in the three
// levels of Google's SRE book ("Handling Overload"): under overload Sheddable requests are
// shed first, then Default ones, and Critical requests keep a reserved share of the limit.
// The zero value is Default.
type Criticality int8

const (
	Sheddable Criticality = -1 // shed first; never waits for a permit
	Default   Criticality = 0  // the zero value
	Critical  Criticality = 1  // may use the whole limit, served first from the queue
)

// ParseCriticality reads a criticality by its Google SRE name, case-insensitively:
// "critical_plus" and "critical" are Critical, "default" and "sheddable_plus" are Default,
// "sheddable" is Sheddable. Any other string, which a client may send, is (Default, false),
// never an error.
func ParseCriticality(s string) (Criticality, bool) {
	switch {
	case strings.EqualFold(s, "critical"), strings.EqualFold(s, "critical_plus"):
		return Critical, true
	case strings.EqualFold(s, "default"), strings.EqualFold(s, "sheddable_plus"):
		return Default, true
	case strings.EqualFold(s, "sheddable"):
		return Sheddable, true
	}
	return Default, false
}

// String is the criticality's name as ParseCriticality reads it: "critical", "default" or
// "sheddable". A value outside the three is named as the one it counts as (see valid).
func (c Criticality) String() string {
	switch c.valid() {
	case Critical:
		return "critical"
	case Sheddable:
		return "sheddable"
	}
	return "default"
}

// valid is c clamped to the three levels: above Critical counts as Critical, below
// Sheddable as Sheddable.
func (c Criticality) valid() Criticality { return min(max(c, Sheddable), Critical) }
