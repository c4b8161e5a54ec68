//go:build !linux

package main

func trimStartupPages() {}
