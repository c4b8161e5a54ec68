module ticketing.invalid/client-java

go 1.26
