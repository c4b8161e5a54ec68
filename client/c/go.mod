module ticketing.invalid/client-c

go 1.26
