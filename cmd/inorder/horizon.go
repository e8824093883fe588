package main

import (
	"fmt"

	"github.com/inorder-dev/inorder/inordertype"
)

// parseHorizon reads --horizon: "auto" (or ""), "clock", "writers" or "transactions".
func parseHorizon(s string) (inordertype.Horizon, error) {
	switch inordertype.Horizon(s) {
	case "auto", inordertype.HorizonAuto:
		return inordertype.HorizonAuto, nil
	case inordertype.HorizonClock, inordertype.HorizonWriters, inordertype.HorizonTransactions:
		return inordertype.Horizon(s), nil
	}
	return "", fmt.Errorf("horizon %q is none of auto, clock, writers and transactions", s)
}
