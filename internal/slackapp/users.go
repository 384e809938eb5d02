package slackapp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sync"
)

// Users maps Slack users to rein principals: the users file
// (--slack-users), read whole at start and again on each Reload.
//
//	{"contact": "#rein-admins",
//	 "users": [{"team_id": "T0123ABCD", "user_id": "U0123ABCD",
//	            "principal": "alice", "tenant": "acme"}]}
//
// A Slack user is its workspace (team_id) and its ID in it (user_id); the
// principal and tenant name an entry of the tokens file (--tokens), whose
// roles it decides with. contact says whom an unmapped user should ask.
type Users struct {
	path string
	// known reports whether the tokens file lists a principal; nil
	// checks nothing.
	known func(tenant, id string) bool
	// mu guards cur.
	mu  sync.Mutex
	cur *userMap
}

// userMap is one reading of the users file.
type userMap struct {
	contact string
	byUser  map[[2]string]Mapped
}

// Mapped is the rein principal a Slack user is.
type Mapped struct {
	Principal, Tenant string
}

// usersFile is the users file's JSON form.
type usersFile struct {
	Contact string `json:"contact"`
	Users   []struct {
		TeamID    string `json:"team_id"`
		UserID    string `json:"user_id"`
		Principal string `json:"principal"`
		Tenant    string `json:"tenant"`
	} `json:"users"`
}

// LoadUsers reads the users file at path. known, when not nil, reports
// whether the tokens file lists a principal: a file naming one it does not
// is refused.
func LoadUsers(path string, known func(tenant, id string) bool) (*Users, error) {
	u := &Users{path: path, known: known}
	m, err := u.read()
	if err != nil {
		return nil, err
	}
	u.cur = m
	return u, nil
}

// Reload reads the file again; a file that is refused leaves the mapping
// as it was. It returns how many users the mapping holds.
func (u *Users) Reload() (int, error) {
	m, err := u.read()
	if err != nil {
		return 0, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.cur = m
	return len(m.byUser), nil
}

// Len is how many users the mapping holds.
func (u *Users) Len() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.cur.byUser)
}

// lookup is the principal of Slack user user of workspace team, and whom
// to ask when there is none.
func (u *Users) lookup(team, user string) (m Mapped, contact string, ok bool) {
	u.mu.Lock()
	cur := u.cur
	u.mu.Unlock()
	m, ok = cur.byUser[[2]string{team, user}]
	return m, cur.contact, ok
}

func (u *Users) read() (*userMap, error) {
	data, err := os.ReadFile(u.path)
	if err != nil {
		return nil, fmt.Errorf("read the Slack users file: %w", err)
	}
	m, err := parseUsers(data, u.known)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u.path, err)
	}
	return m, nil
}

func parseUsers(data []byte, known func(tenant, id string) bool) (*userMap, error) {
	var f usersFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not a Slack users file: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("not a Slack users file: data after the first JSON object")
	}
	m := &userMap{contact: f.Contact, byUser: map[[2]string]Mapped{}}
	for i, e := range f.Users {
		where := fmt.Sprintf("users[%d]", i)
		if e.TeamID == "" || e.UserID == "" || e.Principal == "" || e.Tenant == "" {
			return nil, fmt.Errorf("%s: team_id, user_id, principal and tenant are required", where)
		}
		key := [2]string{e.TeamID, e.UserID}
		if had, dup := m.byUser[key]; dup {
			return nil, fmt.Errorf("%s: Slack user %s of team %s is listed twice (as %s of %s already)", where, e.UserID, e.TeamID, had.Principal, had.Tenant)
		}
		if known != nil && !known(e.Tenant, e.Principal) {
			return nil, fmt.Errorf("%s: principal %q of tenant %q is not in the tokens file (or is listed there with different roles): add it there first", where, e.Principal, e.Tenant)
		}
		m.byUser[key] = Mapped{Principal: e.Principal, Tenant: e.Tenant}
	}
	return m, nil
}
