package inordertype_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/inorder-dev/inorder/inordertype"
)

// A Position has three forms, which String and the JSON form tell apart.
func Example() {
	at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	for _, p := range []inordertype.Position{
		{},                        // the beginning
		{CreatedAt: at},           // after every row created at or before at
		{CreatedAt: at, ID: "42"}, // after the row (at, 42)
	} {
		b, _ := json.Marshal(p)
		fmt.Printf("%-30s %s\n", p, b)
	}
	// Output:
	// beginning                      {"created_at":null,"id":null}
	// after 2024-05-01T10:00:00Z     {"created_at":"2024-05-01T10:00:00Z","id":null}
	// 2024-05-01T10:00:00Z/42        {"created_at":"2024-05-01T10:00:00Z","id":"42"}
}

// ParseStartFrom reads what String writes, as the CLI's --start-from takes it.
func ExampleParseStartFrom() {
	for _, v := range []string{"beginning", "now", "2024-05-01T10:00:00Z"} {
		s, err := inordertype.ParseStartFrom(v)
		if err != nil {
			panic(err)
		}
		fmt.Println(s, s.IsBeginning(), s.IsNow(), s.Time())
	}
	fmt.Printf("%q %v\n", inordertype.StartFrom{}, inordertype.StartFrom{}.IsZero())
	// Output:
	// beginning true false 0001-01-01 00:00:00 +0000 UTC
	// now false true 0001-01-01 00:00:00 +0000 UTC
	// 2024-05-01T10:00:00Z false false 2024-05-01 10:00:00 +0000 UTC
	// "" true
}

// A Source for a table whose created_at the application writes with now(): the processor then waits for
// every transaction of the database that could still insert.
func ExampleSource() {
	src := inordertype.Source{
		Table:     "sales.bookings",
		KeyColumn: "booking_id",
		Horizon:   inordertype.HorizonTransactions,
		Partition: &inordertype.Partition{Index: 2, Count: 8},
	}
	fmt.Println(src.Table, src.Horizon == inordertype.HorizonTransactions, src.Partition.Index, "of", src.Partition.Count)
	// Output:
	// sales.bookings true 2 of 8
}
