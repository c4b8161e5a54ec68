module ticketing.invalid/client-rust

go 1.26
