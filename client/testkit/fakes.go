package testkit

func faultScenarios() []Scenario { return nil }
