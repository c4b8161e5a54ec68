module ticketing.invalid/client-kotlin

go 1.26
