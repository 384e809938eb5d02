package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/reinhq/rein/internal/tools"
)

// The file's buckets. Keys are IDs as bytes, values JSON.
var (
	// bucketMeta holds "schema" → schemaVersion, so that a foreign file is
	// refused instead of written into.
	bucketMeta = []byte("meta")
	// bucketInvoices maps an invoice ID to its invoice.
	bucketInvoices = []byte("invoices")
	// bucketRefunds maps a refund ID ("re_N", N from the bucket's sequence)
	// to its refund.
	bucketRefunds = []byte("refunds")
	// bucketOperations maps an operation ID (rein's idempotency key) to the
	// refund it made and its receipt, written in the refund's transaction.
	bucketOperations = []byte("operations")

	keySchema     = []byte("schema")
	schemaVersion = []byte("rein-example-billing/1")
)

// Billing is the invoices and refunds of one bbolt file, as a tools.Executor
// and tools.Looker. Every operation is one short bbolt transaction: a
// refund, its invoice's new refunded total and the record of its operation
// ID commit together or not at all, so a refused request changes no byte
// and a commit that is repeated finds the first one's record.
type Billing struct {
	db *bolt.DB
}

var (
	_ tools.Executor = (*Billing)(nil)
	_ tools.Looker   = (*Billing)(nil)
)

// Open opens (creating it, with a few seeded invoices, if it is new) the
// billing file at path. It refuses a file that is not one: a bbolt file
// that holds other buckets is left untouched.
func Open(path string) (*Billing, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("open %s: the file is locked by another process (is another toolservice running on it?)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := db.Update(initialize); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return &Billing{db: db}, nil
}

// initialize checks that the file is a billing file, or makes a new
// (empty) one into one, with the seed invoices.
func initialize(tx *bolt.Tx) error {
	if meta := tx.Bucket(bucketMeta); meta != nil {
		if got := meta.Get(keySchema); string(got) != string(schemaVersion) {
			return fmt.Errorf("the file is schema %q, not %q; give this service its own file", got, schemaVersion)
		}
		return nil
	}
	var foreign []string
	if err := tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
		foreign = append(foreign, string(name))
		return nil
	}); err != nil {
		return err
	}
	if len(foreign) > 0 {
		return fmt.Errorf("the file is not a billing file (it holds buckets %v); give this service its own file", foreign)
	}
	for _, name := range [][]byte{bucketMeta, bucketInvoices, bucketRefunds, bucketOperations} {
		if _, err := tx.CreateBucket(name); err != nil {
			return err
		}
	}
	if err := tx.Bucket(bucketMeta).Put(keySchema, schemaVersion); err != nil {
		return err
	}
	for _, inv := range seedInvoices {
		if err := putJSON(tx.Bucket(bucketInvoices), inv.ID, inv); err != nil {
			return err
		}
	}
	return nil
}

// seedInvoices are the invoices of a new file.
var seedInvoices = []invoice{
	{ID: "INV-1001", Customer: "Acme Ltd", Amount: 12000, Currency: "EUR", Status: "paid"},
	{ID: "INV-1002", Customer: "Globex GmbH", Amount: 98050, Currency: "EUR", Status: "paid"},
	{ID: "INV-1003", Customer: "Initech Inc", Amount: 7500, Currency: "USD", Status: "open"},
}

// Close closes the file.
func (b *Billing) Close() error { return b.db.Close() }

// invoice is a stored invoice. Refunded is the sum of its refunds.
type invoice struct {
	ID       string `json:"invoice_id"`
	Customer string `json:"customer"`
	Amount   cents  `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
	Refunded cents  `json:"refunded"`
}

func (inv *invoice) refundable() cents {
	if inv.Status != "paid" {
		return 0
	}
	return inv.Amount - inv.Refunded
}

// refund is a stored refund.
type refund struct {
	ID          string `json:"refund_id"`
	InvoiceID   string `json:"invoice_id"`
	Amount      cents  `json:"amount"`
	Currency    string `json:"currency"`
	Reason      string `json:"reason"`
	OperationID string `json:"operation_id"`
}

// operation is the record of an operation ID: the request it carried, so
// that a key reused for another refund is refused, and the receipt every
// repeat gets.
type operation struct {
	InvoiceID string          `json:"invoice_id"`
	Amount    cents           `json:"amount"`
	Reason    string          `json:"reason"`
	Receipt   json.RawMessage `json:"receipt"`
}

// cents is an amount in minor units, written "120.00" in JSON.
type cents int64

func (c cents) String() string {
	sign := ""
	if c < 0 {
		sign, c = "-", -c
	}
	return fmt.Sprintf("%s%d.%02d", sign, c/100, c%100)
}

func (c cents) MarshalJSON() ([]byte, error) { return json.Marshal(c.String()) }

func (c *cents) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	v, err := parseCents(s)
	*c = v
	return err
}

var decimal = regexp.MustCompile(`^[0-9]{1,12}(\.[0-9]{1,2})?$`)

// parseCents reads "120", "120.5" or "120.00".
func parseCents(s string) (cents, error) {
	if !decimal.MatchString(s) {
		return 0, fmt.Errorf("%q is not an amount: write it like \"40.00\" (at most 2 decimals)", s)
	}
	whole, frac, _ := strings.Cut(s, ".")
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, err
	}
	frac = (frac + "00")[:2]
	f, err := strconv.ParseInt(frac, 10, 64)
	if err != nil {
		return 0, err
	}
	return cents(w*100 + f), nil
}

func loadInvoice(tx *bolt.Tx, id string) (invoice, error) {
	raw := tx.Bucket(bucketInvoices).Get([]byte(id))
	if raw == nil {
		return invoice{}, invalid("no invoice %q; invoice IDs look like \"INV-1001\"", id)
	}
	var inv invoice
	if err := json.Unmarshal(raw, &inv); err != nil {
		return invoice{}, fmt.Errorf("invoice %s: %w", id, err)
	}
	return inv, nil
}

func putJSON(b *bolt.Bucket, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put([]byte(key), data)
}

func jsonValue(data []byte) (*structpb.Value, error) {
	v := &structpb.Value{}
	if err := v.UnmarshalJSON(data); err != nil {
		return nil, err
	}
	return v, nil
}
